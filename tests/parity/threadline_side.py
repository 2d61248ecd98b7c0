"""The Threadline side of the parity suite: runs every scenario of ``scenarios.json`` on the
cluster (the services serve :mod:`tests.parity.agents`) and records what
``tests/parity/runner.mjs`` records on Mastra's side.

Per scenario: ``chunks`` (the thread subscription's stream), ``requests`` (every model request
body, from the fake server's journal), ``thread`` (the stored messages: role and content) and
``returns`` (what each call returned). Return values are read through Mastra's names
(``finish_reason`` as ``finishReason``): the spelling of the language is not a difference.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from tests.e2e.helpers import rows
from tests.parity.catalogue import PROCESSORS, SCHEMAS
from threadline.client import ThreadlineClient
from threadline.testing.model_script import ModelScript

RESOURCE = "res-parity"
_RESULT_KEYS = {"text": "text", "finish_reason": "finishReason", "object": "object", "tripwire": "tripwire",
                "error": "error", "usage": "usage"}


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(w.title() for w in rest)


def _camel_keys(value: Any) -> Any:
    """``value`` with every dict key in Mastra's spelling (``coalesced_count`` → ``coalescedCount``)."""
    if isinstance(value, dict):
        return {_camel(k): _camel_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_camel_keys(v) for v in value]
    return value


def _accepted(reply: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"action": reply.action}
    if reply.run_id:
        out["runId"] = reply.run_id
    return out


def _signal(sig: Any) -> dict[str, Any] | None:
    if sig is None:
        return None
    fields = {"id": sig.id, "type": sig.type, "contents": sig.contents, "attributes": sig.attributes,
              "metadata": sig.metadata, "createdAt": sig.created_at, "acceptedAt": sig.accepted_at,
              "tagName": sig.tag_name}
    return {k: v for k, v in fields.items() if v not in (None, {}, "")}


def _notified(result: dict[str, Any]) -> dict[str, Any]:
    """One ``sendNotificationSignal`` result as runner.mjs records it: ``persisted`` as ``true``,
    the woken run's ``output`` as ``accepted.output: true``."""
    out = _camel_keys({k: v for k, v in result.items() if k not in ("output", "persisted")})
    if "persisted" in result:
        out["persisted"] = True
    if "output" in result:
        out["accepted"]["output"] = True
    return out


def _result(reply: Any) -> dict[str, Any]:
    return {mastra: getattr(reply, py) for py, mastra in _RESULT_KEYS.items() if getattr(reply, py) is not None}


async def _idle(tl: ThreadlineClient, thread: str, timeout_s: float = 10) -> None:
    """Until the thread's run has released its lease (Mastra's ``stream``/``generate`` return when
    the run is over; here the lease is released just after ``finish``, docs/decisions.md#wake-lease)."""
    deadline = time.monotonic() + timeout_s
    while await tl.active_run_id(resource_id=RESOURCE, thread_id=thread) is not None and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


def _options(call: dict[str, Any]) -> dict[str, Any] | None:
    """The call's options: a structured-output schema named by the table as its JSON Schema,
    per-call processors as objects of the catalogue (the client sends them by reference or id)."""
    options = call.get("options")
    if options and "memory" in options:  # Mastra's memory.options: the client's memoryOptions
        options = {**{k: v for k, v in options.items() if k != "memory"}, "memoryOptions": options["memory"]["options"]}
    for key in ("inputProcessors", "outputProcessors"):  # per-call processors, given as objects
        if options and key in options:
            options = {**options, key: [PROCESSORS[p["kind"]](**p.get("args", {})) for p in options[key]]}
    if options and "structuredOutput" in options:
        schema = SCHEMAS[options["structuredOutput"]["schema"]].model_json_schema()
        options = {**options, "structuredOutput": {**options["structuredOutput"], "schema": schema}}
    return options


async def _call(tl: ThreadlineClient, agent: str, call: dict[str, Any], thread: str) -> dict[str, Any]:
    """One call of a scenario, as the client's method of the same name; returns its record."""
    verb = call["verb"]
    where = {"agent_id": agent, "resource_id": RESOURCE, "thread_id": thread}
    routing = {k: call[m] for k, m in (("if_active", "ifActive"), ("if_idle", "ifIdle")) if m in call}
    if verb == "stream":  # Mastra's stream returns the output at once: compared are its text, finish reason,
        # tripwire and error (a failed run's stream does not raise: its result carries the error)
        sent = await tl.stream(call["message"], options=_options(call), **where)
        accepted = await sent.accepted
        if accepted.output is None:  # not a wake: delivered into (or queued behind) a run
            return {"verb": verb, "accepted": _accepted(accepted)}
        result = {"text": await accepted.output.text(timeout_s=30),
                  "finishReason": await accepted.output.finish_reason(timeout_s=5),
                  "tripwire": await accepted.output.tripwire(timeout_s=5),
                  "error": await accepted.output.error(timeout_s=5)}
        if result["finishReason"] != "suspended":  # a run waiting for approval keeps its thread
            await _idle(tl, thread)
        return {"verb": verb, "result": {k: v for k, v in result.items() if v is not None}}
    if verb in ("approveToolCall", "declineToolCall"):
        return {"verb": verb, "result": await _answer(tl, call, thread)}
    if verb == "generate":
        reply = await tl.generate(call["message"], options=_options(call), timeout_s=30, **where)
        await _idle(tl, thread)
        return {"verb": verb, "result": _result(reply)}
    if verb in ("sendMessage", "queueMessage"):
        method = tl.send_message if verb == "sendMessage" else tl.queue_message
        if verb == "queueMessage":
            routing.pop("if_active", None)
        sent = await method(call["message"], **where, **routing)
        return {"verb": verb, "accepted": _accepted(await sent.accepted), "signal": _signal(sent.signal)}
    if verb == "sendSignal":
        sent = await tl.send_signal(call["signal"], **where, **routing)
        return {"verb": verb, "accepted": _accepted(await sent.accepted), "signal": _signal(sent.signal)}
    if verb == "sendStateSignal":
        sent = await tl.send_state_signal(call["state"], **where, **routing)
        if sent.skipped:  # known when the call returns, as Mastra's
            return {"verb": verb, "skipped": True, "reason": sent.reason}
        return {"verb": verb, "accepted": _accepted(await sent.accepted), "signal": _signal(sent.signal)}
    if verb == "sendNotificationSignal":
        routing.pop("if_active", None)
        reply = await tl.send_notification_signal(call["notification"], **where, **routing)
        results = [_notified(r) for r in reply.results]
        return {"verb": verb, "result": results if isinstance(call["notification"], list) else results[0]}
    if verb == "abort":
        return {"verb": verb, "aborted": await tl.abort(resource_id=RESOURCE, thread_id=thread, agent_id=agent)}
    if verb == "activeRunId":
        return {"verb": verb, "running": await tl.active_run_id(resource_id=RESOURCE, thread_id=thread) is not None}
    raise ValueError(f"unknown verb {verb}")


async def _answer(tl: ThreadlineClient, call: dict[str, Any], thread: str) -> dict[str, Any]:
    """Approve or decline the call the thread's run holds (its ``tool-call-approval`` chunk, as
    recorded by the scenario's subscription, ``call["held"]``); the run's output from the answer on
    (after the last chunk of the run the subscription saw, ``call["seen"]``)."""
    held = call["held"]
    run_id, call_id = held["runId"], held["payload"]["toolCallId"]
    output = tl.run_output(run_id, resource_id=RESOURCE, thread_id=thread, sent_at_ms=int(time.time() * 1000),
                           after_seq=max(c["seq"] for c in call["seen"] if c.get("runId") == run_id))
    where = {"resource_id": RESOURCE, "thread_id": thread, "run_id": run_id, "tool_call_id": call_id}
    if call["verb"] == "approveToolCall":
        await tl.approve_tool_call(**where)
    else:
        await tl.decline_tool_call(**where, reason=call.get("reason"))
    result = {"text": await output.text(timeout_s=30), "finishReason": await output.finish_reason(timeout_s=5)}
    await _idle(tl, thread)
    return result


async def run_scenario(tl: ThreadlineClient, model: ModelScript, dsn: str, s: dict[str, Any]) -> dict[str, Any]:
    """Run scenario ``s`` and return its record (raises what a call raised only through ``raised``)."""
    name, llm = f"parity-{s['id']}", f"threadline-parity-{s['id']}"
    model.queue(s.get("script", []), model=llm)
    for sub in s["agent"].get("agents", []):
        model.queue(sub.get("script", []), model=f"{llm}-{sub['key']}")
    for suffix, scripts in s.get("extra_scripts", {}).items():
        model.queue(scripts, model=f"{llm}-{suffix}")
    thread = f"th-{s['id']}"
    rec: dict[str, Any] = {"chunks": [], "returns": [], "requests": [], "thread": []}
    finishes = s.get("finishes", len(s["calls"]))
    sub = await tl.subscribe_to_thread(RESOURCE, thread)

    last = [time.monotonic()]

    async def pump() -> None:
        seen = 0
        async for chunk in sub.stream:
            rec["chunks"].append(chunk)
            last[0] = time.monotonic()
            seen += chunk["type"] == "finish"
            if seen >= finishes:
                return

    pumping = asyncio.create_task(pump())
    for call in s["calls"]:
        if call.get("wait") and not await _wait_for(rec["chunks"], call["wait"]):
            rec.setdefault("missed", []).append(call["wait"])
        if call.get("sleep_s"):
            await asyncio.sleep(call["sleep_s"])
        if call["verb"] in ("approveToolCall", "declineToolCall"):  # the held call, as the stream showed it
            held = [c for c in rec["chunks"] if c["type"] == "tool-call-approval"]
            call = {**call, "held": held[-1] if held else {"runId": None, "payload": {}}, "seen": list(rec["chunks"])}
        try:
            rec["returns"].append(await _call(tl, name, call, thread))
        except Exception as exc:  # noqa: BLE001 - a refused call is a result to compare, not a crash
            rec["returns"].append({"verb": call["verb"], "raised": str(exc)})
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(_quiet(pumping, rec["chunks"], last), s.get("timeout_s", 30))
    pumping.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await pumping
    await sub.unsubscribe()
    await asyncio.sleep(0.3)  # the run's last messages are stored with `finish`; its end just after
    models = {llm, *(f"{llm}-{a['key']}" for a in s["agent"].get("agents", [])),
              *(f"{llm}-{k}" for k in s.get("extra_scripts", {}))}
    rec["requests"] = [{"model": r["model"], "body": r["body"]} for r in model.requests() if r["model"] in models]
    stored = await rows(dsn, "SELECT role, content FROM messages WHERE thread_id = $1 AND resource_id = $2 "
                             "ORDER BY position", thread, RESOURCE)
    rec["thread"] = [{"role": r["role"], "content": r["content"]} for r in stored]
    return rec


QUIET_S = 3.0
"""A run that ends without ``finish`` (Mastra: a tripwire, an abort) is taken as ended once
chunks have arrived and none came for this long, or when none came at all for twice as long
(the same rule as runner.mjs)."""


async def _quiet(pumping: asyncio.Task[None], chunks: list[Any], last: list[float]) -> None:
    calm = time.monotonic()
    while not pumping.done():
        now = time.monotonic()
        if (now - max(last[0], calm) > QUIET_S) if chunks else (now - calm > 2 * QUIET_S):
            return
        await asyncio.sleep(0.05)


async def _wait_for(chunks: list[dict[str, Any]], kind: str, timeout_s: float = 15) -> bool:
    """True once a chunk of type ``kind`` is among ``chunks``; False after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not any(c["type"] == kind for c in chunks):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


async def run_all(settings: Any, model_url: str, dsn: str, scenarios: list[dict[str, Any]],
                  concurrency: int = 8) -> dict[str, dict[str, Any]]:
    """Every scenario, ``concurrency`` at a time (each has its own thread and model queue)."""
    model = ModelScript(model_url)
    out: dict[str, dict[str, Any]] = {}
    gate = asyncio.Semaphore(concurrency)
    async with ThreadlineClient(settings) as tl:

        async def one(s: dict[str, Any]) -> None:
            async with gate:
                started = time.monotonic()
                try:
                    out[s["id"]] = await run_scenario(tl, model, dsn, s)
                except Exception as exc:  # noqa: BLE001 - one broken scenario must not hide the others
                    out[s["id"]] = {"failed": repr(exc)}
                out[s["id"]]["seconds"] = round(time.monotonic() - started, 2)

        await asyncio.gather(*(one(s) for s in scenarios))
    return out
