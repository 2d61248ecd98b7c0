"""D11: a tool (or workflow step) whose result has no JSON form of its own. The side effect has
happened by then, so the value is either coerced by one documented rule — the same JSON on the
chunk, in the stored message and in the next model request — or, where it has no JSON form at
all, the call ends as a ``tool-error`` naming the type and the path (docs/tools.md, decision 217).
Never a fault handed back to be retried: the tool runs exactly once, the attempt stays 1, no
sweeper recovery, the run ends ``finish {stop}`` after the model's next answer."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import orjson

from tests.e2e.agents.composition import SIDE_EFFECTS_DDL
from tests.e2e.helpers import content, execute, one_tool_run, rows, run_row, wait_idle
from tests.e2e.records import read_all
from threadline.client import ThreadlineClient
from threadline.topics import Topics

COERCED: dict[str, Any] = {
    "dec": {"amount": "12.50"},
    "aset": {"ids": [1, 2, 3]},
    "raw": {"base64": "AP8="},
    "big": {"n": str(2**70)},
    "nan": {"x": None},
}
"""The result each coerced tool's call ends with (the rule of decision 217)."""
REFUSED: dict[str, str] = {
    "obj": "result not JSON-serialisable: object at $",
    "tkey": "result not JSON-serialisable: tuple as a dict key at $",
}
"""The error each refused tool's call ends with."""
WF_OUTPUT = {"after": {"when": "1.5"}}


async def _one(tl: ThreadlineClient, model: Any, tool: str, tag: str) -> dict[str, Any]:
    """One ``d11`` run: step 0 calls ``tool``, step 1 answers "ok"."""
    return await one_tool_run(tl, model, agent="d11", prefix="d11", tool=tool, tag=tag)


async def _stored_invocation(dsn: str, run_id: str, call: str) -> dict[str, Any]:
    for m in await rows(dsn, "SELECT content FROM messages WHERE run_id = $1 ORDER BY position", run_id):
        for part in m["content"].get("parts") or ():
            inv = part.get("toolInvocation") if part.get("type") == "tool-invocation" else None
            if inv and inv["toolCallId"] == call:
                return inv
    raise AssertionError(f"no stored invocation of {call}")


def _tool_message(model: Any, thread: str, call: str) -> str:
    """The content of the tool message answering ``call`` in the run's second model request."""
    [request] = model.requests(model=f"threadline-d11-{thread}-s1")
    [msg] = [m for m in request["body"]["messages"] if m.get("role") == "tool" and m.get("tool_call_id") == call]
    return msg["content"]


async def _assert_once(dsn: str, out: dict[str, Any], effects: list[str]) -> None:
    """The side effects ran once each, on the first attempt, with no recovery; the run ended ``stop``."""
    run_id = out["run_id"]
    got = [r["k"] for r in await rows(dsn, "SELECT k FROM side_effects WHERE k LIKE '%:' || $1", run_id)]
    assert sorted(got) == sorted(f"{e}:{run_id}" for e in effects), got
    seq = content(out["chunks"])
    assert seq[-1] == ("finish", "stop") and "attempt-discarded" not in [t for t, _ in seq], seq
    row = await run_row(dsn, run_id)
    assert row["status"] == "finished" and row["attempt"] == 1, dict(row)
    assert not await rows(dsn, "SELECT 1 FROM run_recoveries WHERE run_id = $1", run_id)
    assert await wait_idle(dsn, out["thread"], timeout_s=15)


async def _no_fault(services: Any, cluster: Any, threads: list[str]) -> None:
    """No service died and nothing of the threads was dead-lettered."""
    assert all(services.alive().values()), services.alive()
    letters = await read_all(cluster.bootstrap, [Topics(cluster.prefix).dead_letters], partitions=None)
    assert not [d for d in letters if any(t in orjson.dumps(d).decode() for t in threads)]


async def test_d11_results_with_no_json_form_are_coerced_or_refused_once(services, settings, model, cluster):
    await execute(cluster.dsn, SIDE_EFFECTS_DDL)
    tag = uuid.uuid4().hex[:6]
    async with ThreadlineClient(settings) as tl:
        outs = await asyncio.gather(*(_one(tl, model, tool, tag) for tool in [*COERCED, *REFUSED]))
    for out in outs:
        tool, call = out["tool"], out["call"]
        await _assert_once(cluster.dsn, out, [tool])
        ends = [(t, p) for t, p in content(out["chunks"]) if t in ("tool-result", "tool-error")]
        assert len(ends) == 1, (tool, ends)
        kind, payload = ends[0]
        stored = await _stored_invocation(cluster.dsn, out["run_id"], call)
        sent = _tool_message(model, out["thread"], call)
        if tool in COERCED:
            assert kind == "tool-result" and payload["result"] == COERCED[tool], (tool, payload)
            assert stored["state"] == "result" and stored["result"] == COERCED[tool], (tool, stored)
            assert json.loads(sent) == COERCED[tool], (tool, sent)
        else:
            assert kind == "tool-error" and payload["error"]["message"] == REFUSED[tool], (tool, payload)
            assert stored["state"] == "output-error" and stored["errorText"] == REFUSED[tool], (tool, stored)
            assert REFUSED[tool] in sent, (tool, sent)
    await _no_fault(services, cluster, [o["thread"] for o in outs])


async def test_d11_a_workflow_step_with_a_decimal_is_recorded_once_and_the_next_step_runs_once(
        services, settings, model, cluster):
    await execute(cluster.dsn, SIDE_EFFECTS_DDL)
    async with ThreadlineClient(settings) as tl:
        out = await _one(tl, model, "workflow-wf", uuid.uuid4().hex[:6])
    await _assert_once(cluster.dsn, out, ["wf.s1", "wf.s2"])
    journal = {r["path"]: r for r in await rows(cluster.dsn, "SELECT * FROM workflow_steps WHERE run_id = $1",
                                                out["run_id"])}
    assert {p: (r["status"], r["runs"]) for p, r in journal.items()} == {"0/s1": ("success", 1),
                                                                          "1/s2": ("success", 1)}
    assert journal["0/s1"]["output"] == {"when": "1.5"}
    [(kind, payload)] = [(t, p) for t, p in content(out["chunks"]) if t in ("tool-result", "tool-error")]
    assert kind == "tool-result" and payload["result"] == WF_OUTPUT, payload
    assert json.loads(_tool_message(model, out["thread"], out["call"])) == WF_OUTPUT
    await _no_fault(services, cluster, [out["thread"]])


async def test_d11_a_data_chunk_a_tool_writes_goes_through_the_same_rule(services, settings, model, cluster):
    await execute(cluster.dsn, SIDE_EFFECTS_DDL)
    async with ThreadlineClient(settings) as tl:
        out = await _one(tl, model, "dchunk", uuid.uuid4().hex[:6])
    await _assert_once(cluster.dsn, out, ["dchunk"])
    seq = content(out["chunks"])
    assert [d for t, d in seq if t == "data-d11"] == [{"v": "2.5", "s": [1, 2]}], seq
    assert [p["result"] for t, p in seq if t == "tool-result"] == ["written"]
    parts = [p for m in await rows(cluster.dsn, "SELECT content FROM messages WHERE run_id = $1", out["run_id"])
             for p in m["content"].get("parts") or () if p.get("type") == "data-d11"]
    assert [p["data"] for p in parts] == [{"v": "2.5", "s": [1, 2]}]
    await _no_fault(services, cluster, [out["thread"]])
