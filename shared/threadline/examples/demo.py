"""``make demo``: a support conversation through the running cluster, as a user would drive it.

Publishes two user turns to the ingress topic, prints the live stream from the thread's chunk
topic (text as it arrives, the tool call and result, the data chunk, finish); sends a message into
a running run and queues one; sends a high-priority notification while the agent is busy (its
summary reaches the running run, the full notification wakes the thread once it is idle); then
prints the inbox and the stored thread from Postgres. Exits non-zero if anything fails.

With the default local model the demo scripts the model's replies; with ``THREADLINE_MODEL``
set to a real model (and its key, e.g. ``OPENAI_API_KEY``) the same demo runs on that model.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import asyncpg

from threadline.client import Subscription, ThreadlineClient
from threadline.config import get_settings
from threadline.events.chunk_types import ChunkBody, ChunkKind, FinishChunk, is_data_kind, known
from threadline.runtime.model.llm import LOCAL_MARKER
from threadline.store import queries
from threadline.topics import Topics

AGENT = "support-agent"
TURNS = [
    ("How is customer C-1001 doing? Anything open?",
     [{"tool_calls": [{"name": "lookup_customer", "arguments": {"customer_id": "C-1001"}, "pieces": 3}],
       "chunk_delay": 0.02},
      {"chunks": ["Ada Lovelace ", "(C-1001) ", "is on the ", "pro plan ", "and has ", "2 open tickets."],
       "chunk_delay": 0.05}]),
    ("Thanks! Can you summarise that in one line?",
     [{"chunks": ["C-1001: ", "pro plan, ", "2 open tickets."], "chunk_delay": 0.05}]),
]
# turn 3: a message sent while the agent answers joins the running run; a queued one is the next turn
LIVE = ("Draft a short reply to Ada about her tickets.",
        "Also mention that we answer within a day.",
        "Thanks, that is all for today.",
        [{"chunks": ["Dear Ada, ", "we are looking ", "into your two ", "open tickets ", "and will ", "update you ",
                     "soon."], "chunk_delay": 0.25},
         {"chunks": ["Dear Ada, ", "we are on your two tickets ", "and answer within a day."], "chunk_delay": 0.05},
         {"chunks": ["You're welcome, ", "have a good day!"], "chunk_delay": 0.05}])

# turn 4: a notification arrives while the agent is busy (send_notification_signal, the default policy)
BUSY = ("Please look through the open tickets of C-1001.",
        {"source": "ci", "kind": "deploy", "priority": "high",
         "summary": "Deploy of billing v2.3 failed at step 'migrate'.",
         "payload": {"pipeline": 4711, "step": "migrate"}},
        [{"chunks": ["Going through ", "Ada's tickets: ", "one about ", "invoices, ", "one about ", "login. ",
                     "Both are ", "in progress."], "chunk_delay": 0.25},
         {"chunks": ["(A deploy problem ", "was just reported; ", "I will look at it next.)"], "chunk_delay": 0.05},
         {"chunks": ["The billing v2.3 deploy ", "failed at 'migrate'; ", "invoices may be delayed."],
          "chunk_delay": 0.05}])


def out(line: str = "", end: str = "\n") -> None:
    sys.stdout.write(line + end)
    sys.stdout.flush()


async def script_local_model(model: str, scripts: list[dict[str, Any]]) -> None:
    import httpx

    base = get_settings().model_api_base or ""
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(base.removesuffix("/v1") + "/_fake/script",
                                   json={"scripts": scripts, "model": model.split("/", 1)[-1]})
        response.raise_for_status()


_seen_models: set[str] = set()
"""The model the workers answered with, once printed."""


async def show_run(sub: Subscription, timeout_s: float = 120.0, stop_after: int = 1) -> FinishChunk:
    """Print run chunks as they arrive until ``stop_after`` runs finished; return the last finish."""
    deadline = time.monotonic() + timeout_s
    finished = 0
    async for chunk in sub.stream:
        show_chunk(chunk)
        k = known(chunk)
        if k is not None and k["type"] == ChunkKind.FINISH:
            finished += 1
            if finished >= stop_after:
                return k
        if time.monotonic() > deadline:
            break
    raise RuntimeError("the run did not finish in time")


def _signal_line(k: Any) -> str:
    data = k["data"]
    return (f"  [{data.get('tagName') or data.get('type')} signal] {data.get('contents')!r} "
            f"{data.get('attributes') or ''}\n")


def _model_line(k: Any) -> str:
    """The model that answered, on its first ``step-finish`` that names it ("" after that)."""
    step_meta = k["payload"].get("metadata")
    meta = step_meta.get("modelMetadata") if step_meta else None
    if _seen_models or not (meta and meta.get("modelId")):
        return ""
    _seen_models.add(meta["modelId"])  # the model the worker called (its THREADLINE_MODEL or the agent's)
    name = f"{meta['modelProvider'].split('.', 1)[0]}/{meta['modelId']}"  # openai.chat: openai
    return f"  [answered by model {name}, as the running workers are configured]\n"


def _finish_line(k: Any) -> str:
    usage = k["payload"].get("output", {}).get("usage")
    return f"  [finish] reason={k['payload'].get('finishReason')} usage={usage}\n"


_LINES: dict[str, Callable[[Any], str]] = {
    ChunkKind.START: lambda k: f"  [run {k.get('runId')} started]\n",
    ChunkKind.DATA_USER_MESSAGE: lambda k: f"  user> {k['data'].get('contents')}\n",
    ChunkKind.TEXT_START: lambda k: "  agent> ",
    ChunkKind.TEXT_DELTA: lambda k: k["payload"]["text"],
    ChunkKind.TEXT_END: lambda k: "\n",
    ChunkKind.TOOL_CALL: lambda k: f"  [tool call] {k['payload']['toolName']}({k['payload'].get('args')})\n",
    ChunkKind.TOOL_RESULT: lambda k: f"  [tool result] {k['payload'].get('result')}\n",
    ChunkKind.DATA_SIGNAL: _signal_line,
    ChunkKind.TRIPWIRE: lambda k: f"  [{k['type']}] {k['payload']}\n",
    ChunkKind.ERROR: lambda k: f"  [{k['type']}] {k['payload']}\n",
    ChunkKind.STEP_FINISH: _model_line,
    ChunkKind.FINISH: _finish_line,
}
"""What the transcript prints for each chunk kind it shows (a text delta continues its line)."""


def show_chunk(chunk: ChunkBody) -> None:
    """Print one chunk as a line (or a part of one) of the demo's transcript."""
    k = known(chunk)
    if k is None:
        if is_data_kind(chunk["type"]):
            out(f"  [{chunk['type']}] {chunk.get('data')}")
        return
    if (line := _LINES.get(k["type"])) is not None and (text := line(k)):
        out(text, end="")


async def notification_while_busy(tl: ThreadlineClient, sub: Subscription, model: str | None,
                                  resource: str, thread: str) -> bool:
    """Turn 4: a high notification while the agent answers: a summary now, in full when idle."""
    text, note, scripts = BUSY
    if model:
        await script_local_model(model, scripts)
    out(f"\n> send_message: {text!r}")
    busy = await (await tl.send_message(text, agent_id=AGENT, resource_id=resource, thread_id=thread)).accepted
    live = asyncio.ensure_future(show_run(sub, stop_after=2))
    await asyncio.sleep(0.8)  # the agent is answering now
    out(f"\n> send_notification_signal while the agent is busy: {note['priority']} {note['source']}/"
        f"{note['kind']}: {note['summary']!r}")
    result = (await tl.send_notification_signal(note, agent_id=AGENT, resource_id=resource,
                                                thread_id=thread)).results[0]
    decision, accepted = result["decision"], result.get("accepted") or {}
    out(f"  decision: {decision['action']} ({decision['reason']}); the summary went to run "
        f"{accepted.get('run_id')} (action={accepted.get('action')}); the full notification waits for idle\n")
    await live
    record = (await tl.inbox(resource_id=resource, thread_id=thread))[-1]
    out(f"\n> inbox of {resource}/{thread}:")
    out(f"  {record['id']} {record['priority']} {record['source']}/{record['kind']} status={record['status']} "
        f"summarized={record['summarized']} delivered_at={record['delivered_at']}")
    full = await tl.read_notification(record["id"], resource_id=resource, thread_id=thread)
    payload = full["payload"] if full is not None else None
    out(f"  payload (for tools and apps, never shown to the model): {payload}")
    ok = (decision["reason"] == "active-high-summary-then-full" and accepted.get("run_id") == busy.run_id
          and record["status"] == "delivered" and record["summarized"])
    if not ok:
        out(f"unexpected notification handling: {result} {record}")
    return ok


async def messages_while_running(tl: ThreadlineClient, sub: Subscription, model: str | None,
                                 resource: str, thread: str) -> bool:
    """Turn 3: a message sent while the agent answers goes into the running run; one queued is the
    next turn. ``False`` (and a line saying so) when either went elsewhere."""
    first, deliver, queued, scripts = LIVE
    if model:
        await script_local_model(model, scripts)
    out(f"\n> send_message: {first!r}")
    accepted = await (await tl.send_message(first, agent_id=AGENT, resource_id=resource, thread_id=thread)).accepted
    out(f"  accepted: action={accepted.action} run_id={accepted.run_id}")
    live = asyncio.ensure_future(show_run(sub, stop_after=2))
    await asyncio.sleep(0.6)  # the agent is answering now
    out(f"\n> send_message while the run is active: {deliver!r}")
    delivered = await (await tl.send_message(deliver, agent_id=AGENT, resource_id=resource,
                                              thread_id=thread)).accepted
    out(f"  accepted: action={delivered.action} run_id={delivered.run_id} (the running run)")
    out(f"> queue_message: {queued!r}")
    queued_ok = await (await tl.queue_message(queued, agent_id=AGENT, resource_id=resource,
                                               thread_id=thread)).accepted
    # Mastra's queueMessage answers ``deliver`` too: delivered to the run that will start next
    out(f"  accepted: action={queued_ok.action} run_id={queued_ok.run_id} (a run of its own, the next turn)\n")
    await live
    if delivered.run_id != accepted.run_id or queued_ok.run_id == accepted.run_id:
        out("unexpected routing of the live messages")
        return False
    return True


def _part_text(part: dict[str, Any]) -> str | None:
    """A stored message part as the transcript shows it (``None``: not shown)."""
    if part["type"] == "text":
        return repr(part["text"])
    if part["type"] == "tool-invocation":
        inv = part["toolInvocation"]
        return f"{inv['toolName']}({inv.get('args')}) -> {inv.get('result')}"
    if part["type"].startswith("data-"):
        return f"{part['type']} {part.get('data')}"
    return None


async def show_stored(dsn: str, resource: str, thread: str) -> bool:
    """Print the thread as stored in PostgreSQL; ``False`` unless it holds the demo's 16 messages."""
    out(f"\nStored thread {thread} (Postgres):")
    conn = await asyncpg.connect(dsn)
    try:
        stored = await queries.list_messages(conn, resource_id=resource, thread_id=thread)
    finally:
        await conn.close()
    for row in stored:
        parts = [text for p in row["content"].get("parts", []) if (text := _part_text(p)) is not None]
        out(f"  {row['role']:<9} " + " | ".join(parts))
    if len(stored) != 16:
        out(f"expected 16 stored messages, found {len(stored)}")
        return False
    return True


async def main() -> int:
    settings = get_settings()
    model = os.environ.get("THREADLINE_MODEL", settings.model)
    local = LOCAL_MARKER in model
    resource, thread = "demo-user", f"demo-{time.strftime('%Y%m%d-%H%M%S')}-{os.urandom(2).hex()}"
    out(f"Threadline demo: agent {AGENT}, thread {resource}/{thread}"
        + (f" (scripting the local model {model})" if local else ""))
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread(resource, thread)
        try:
            for text, scripts in TURNS:
                if local:
                    await script_local_model(model, scripts)
                out(f"\n> publishing send_message to {Topics(settings.topic_prefix).ingress}: {text!r}")
                sent = await tl.send_message(text, agent_id=AGENT, resource_id=resource, thread_id=thread)
                accepted = await sent.accepted
                out(f"  accepted: {accepted.dump()}")
                finish = await show_run(sub)
                if finish["payload"].get("finishReason") not in ("stop", "length"):
                    out(f"run ended with {finish['payload']}", end="\n")
                    return 1
            if not await messages_while_running(tl, sub, model if local else None, resource, thread):
                return 1
            if not await notification_while_busy(tl, sub, model if local else None, resource, thread):
                return 1
        finally:
            await sub.unsubscribe()
    if not await show_stored(settings.pg_dsn, resource, thread):
        return 1
    out("\ndemo OK")
    return 0


if __name__ == "__main__":
    from threadline.logging import configure

    configure(level="WARNING")
    sys.exit(asyncio.run(main()))
