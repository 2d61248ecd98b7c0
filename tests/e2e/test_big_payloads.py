"""Payloads over ``max_record_bytes`` (512 KiB) travel by reference.

A user message of several MB reaches the model intact (the client spills it, ingress resolves
it, the stored history carries it to the worker), and a tool result of several MB reaches the
subscriber intact (the worker's chunk record is spilled, the subscription resolves it). The
records on the wire stay under the limit: the bodies are in ``payloads``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import orjson

from tests.e2e.helpers import collect_run, rows, run_row
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms

LIMIT = 512 * 1024
ROOT = Path(__file__).resolve().parents[2]


def _big_text(n_bytes: int) -> str:
    words, size, i = [], 0, 0
    while size < n_bytes:  # varied words (litellm stops after 100 identical chunks)
        w = f"w{i} "
        words.append(w)
        size += len(w)
        i += 1
    return "".join(words)[:n_bytes]


def _user_text(message: dict) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


async def test_a_message_of_several_mb_reaches_the_model_intact(services, settings, model, cluster):
    text = _big_text(3 * 1024 * 1024)
    thread, tag = f"th-big-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex[:6]
    await model.aqueue([ms.text("Got your long message.")], model=f"threadline-pooled-big{tag}")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-big", thread)
        sent = await tl.stream(text, agent_id="pooled-agent", resource_id="res-big", thread_id=thread,
                               options={"request_context": {"n": f"big{tag}"}})
        run_id = (await sent.accepted).run_id
        chunks = await collect_run(sub, timeout_s=120)
        await sub.unsubscribe()
    assert chunks[-1]["payload"]["finishReason"] == "stop"
    assert (await run_row(cluster.dsn, run_id))["status"] == "finished"
    requests = await model.arequests(model=f"threadline-pooled-big{tag}")
    users = [m for m in requests[0]["body"]["messages"] if m["role"] == "user"]
    assert _user_text(users[-1]) == text  # intact: every byte of it
    echoes = [c for c in chunks if c["type"] == "data-user-message"]
    for echo in echoes:  # the subscriber's echo of the message (if the thread shows it) is whole too
        assert text in orjson_dumps(echo)
    stored = await rows(cluster.dsn, "SELECT size FROM payloads WHERE size > $1 ORDER BY created_at", LIMIT)
    assert any(r["size"] > len(text) for r in stored)  # it went by reference


def orjson_dumps(value: object) -> str:
    import orjson

    return orjson.dumps(value).decode()


async def test_a_tool_result_of_several_mb_reaches_the_subscriber_intact(services, settings, model, cluster):
    size = 2 * 1024 * 1024
    thread, tag = f"th-big-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex[:6]
    await model.aqueue([ms.tool_calls(ms.tool_call("make_blob", {"size": size}, id=f"blob-{tag}")),
                        ms.text("The blob is ready.")], model=f"threadline-pooled-blob{tag}")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-big", thread)
        sent = await tl.stream("make me a blob", agent_id="pooled-agent", resource_id="res-big", thread_id=thread,
                               options={"request_context": {"n": f"blob{tag}"}})
        run_id = (await sent.accepted).run_id
        chunks = await collect_run(sub, timeout_s=120)
        await sub.unsubscribe()
    results = [c for c in chunks if c["type"] == "tool-result"]
    assert len(results) == 1
    blob = results[0]["payload"]["result"]["blob"]
    assert len(blob) == size and blob[:36] == "abcdefghijklmnopqrstuvwxyz0123456789"
    assert blob == ("abcdefghijklmnopqrstuvwxyz0123456789" * (size // 36 + 1))[:size]
    assert chunks[-1]["payload"]["finishReason"] == "stop"
    assert (await run_row(cluster.dsn, run_id))["status"] == "finished"
    # the model's second call got the whole result as the tool message
    second = (await model.arequests(model=f"threadline-pooled-blob{tag}"))[1]["body"]["messages"]
    tool_msgs = [m for m in second if m["role"] == "tool"]
    assert tool_msgs and blob in tool_msgs[-1]["content"]


def _cli(cluster, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "THREADLINE_KAFKA_BOOTSTRAP": cluster.bootstrap,
           "THREADLINE_PG_DSN": cluster.dsn, "THREADLINE_TOPIC_PREFIX": cluster.prefix}
    return subprocess.run([sys.executable, "-m", "threadline.cli", *args], input=stdin, cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_cli_sends_a_2_mb_message_from_stdin_and_from_a_file(services, cluster, tmp_path):
    """Too long for a command line (argument list too long): read from ``-`` (stdin) or ``--file``."""
    text = _big_text(2 * 1024 * 1024)
    (tmp_path / "msg.txt").write_text(text + " (file)", encoding="utf-8")
    thread = f"th-big-cli-{uuid.uuid4().hex[:6]}"
    for source, stdin in ((["-"], text), (["--file", str(tmp_path / "msg.txt")], None)):
        done = _cli(cluster, "send-message", "-r", "res-big", "-t", thread, "-a", "echo-agent",
                    "--if-idle", "persist", *source, stdin=stdin)
        assert done.returncode == 0, done.stdout + done.stderr
        replies = [orjson.loads(line) for line in done.stdout.splitlines()]
        assert replies[0]["action"] == "persist", replies
    shown = _cli(cluster, "thread", "-r", "res-big", "-t", thread)
    assert shown.returncode == 0, shown.stderr
    users = [orjson.loads(line) for line in shown.stdout.splitlines()]
    texts = ["".join(p["text"] for p in m["content"]["parts"] if p["type"] == "text") for m in users]
    assert texts == [text, text + " (file)"]  # intact, in order
