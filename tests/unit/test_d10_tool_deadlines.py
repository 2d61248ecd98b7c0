"""D10, the deadlines as pure logic (decision 218): a tool call runs under its own ``timeout_s``,
else the run's default; past it the call's error is ``ToolTimeoutError`` text naming the tool and
the limit (the tool told through its abort signal), a plain ``def`` left in its thread has its
late return dropped; a workflow step past its deadline is recorded failed and no later step runs.
A ``TimeoutError`` a tool raises itself stays the tool's own error."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from tests.unit.test_workflows import Writer
from threadline.errors import ConfigurationError, ToolTimeoutError
from threadline.runtime.step.tools import run_tool_call, tool_error_name
from threadline.runtime.tools import DEFAULT, ToolContext, ToolHooks, bounded, create_tool, deadline_s
from threadline.runtime.workflows import MemoryJournal, Step, WorkflowStepError, create_workflow, run_workflow
from threadline.transient import is_transient


def _ctx(default_timeout_s: float | None = None, writer: Any = None) -> ToolContext:
    return ToolContext(tool_call_id="c1", run_id="run-1", thread_id="th-1", resource_id="res-1", agent_id="a",
                       step=0, idempotency_key="run-1:c1", writer=writer or SimpleNamespace(),
                       default_timeout_s=default_timeout_s)


async def _call(tool: Any, ctx: ToolContext, hooks: ToolHooks | None = None) -> tuple[object, str | None, float]:
    started = time.monotonic()
    out, error = await run_tool_call(call={"toolName": tool.id, "toolCallId": "c1", "args": {}},
                                     tools={tool.id: tool}, hooks=hooks or ToolHooks(), context=ctx, agent_meta={})
    return out, error, time.monotonic() - started


async def _forever(_a: object) -> str:
    await asyncio.Event().wait()
    return "never"


async def test_d10_a_hanging_tool_ends_at_the_runs_default_deadline_and_is_told() -> None:
    seen: list[object] = []
    ctx = _ctx(default_timeout_s=0.3)
    out, error, took = await _call(create_tool(id="hang", description="", execute=_forever), ctx,
                                   ToolHooks(after_tool_call=lambda c: seen.append(c.error)))
    assert (out, error) == (None, "tool hang timed out after 0.3 s")
    assert 0.25 <= took < 1.0 and ctx.abort_signal.aborted
    assert seen == ["tool hang timed out after 0.3 s"]  # after_tool_call sees the error


async def test_d10_a_sleeping_def_is_left_in_its_thread_and_its_late_return_dropped() -> None:
    gate, returned = threading.Event(), threading.Event()

    def sleeper(_a: object) -> str:
        gate.wait(5)
        returned.set()
        return "late"

    out, error, took = await _call(create_tool(id="nap", description="", execute=sleeper, timeout_s=0.2), _ctx())
    assert (out, error) == (None, "tool nap timed out after 0.2 s") and took < 1.0
    gate.set()
    assert await asyncio.to_thread(returned.wait, 5)  # it returned, to no one


async def test_d10_a_tools_own_timeout_wins_and_none_means_no_deadline() -> None:
    async def nap(_a: object) -> str:
        await asyncio.sleep(0.4)
        return "slept"

    short = create_tool(id="quick", description="", execute=nap, timeout_s=0.1)
    assert (await _call(short, _ctx(default_timeout_s=10)))[:2] == (None, "tool quick timed out after 0.1 s")
    unbounded = create_tool(id="long", description="", execute=nap, timeout_s=None)
    assert (await _call(unbounded, _ctx(default_timeout_s=0.1)))[:2] == ("slept", None)
    assert deadline_s(DEFAULT, 7.0) == 7.0 and deadline_s(None, 7.0) is None and deadline_s(2, 7.0) == 2


async def test_d10_a_timeout_error_the_tool_raises_is_its_own() -> None:
    async def raises(_a: object) -> str:
        raise TimeoutError("upstream timed out")

    assert (await _call(create_tool(id="up", description="", execute=raises), _ctx(5)))[:2] == (
        None, "upstream timed out")
    with pytest.raises(TimeoutError, match="upstream"):
        await bounded(raises(None), 5, "tool up", None)


def test_d10_a_tool_timeout_is_never_a_transient_fault() -> None:
    exc = ToolTimeoutError(what="tool hang", timeout_s=5)
    assert str(exc) == "tool hang timed out after 5 s" and not is_transient(exc)
    assert not isinstance(exc, TimeoutError)


@pytest.mark.parametrize("bad", [0, -1, "5", True])
def test_d10_a_timeout_must_be_positive_seconds_or_none(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="timeout_s"):
        create_tool(id="t", description="", execute=lambda _a: 1, timeout_s=bad)  # type: ignore[arg-type]  # the wrong types under test
    with pytest.raises(ConfigurationError, match="timeout_s"):
        Step(id="s", execute=lambda _a: 1, timeout_s=bad)  # type: ignore[arg-type]  # the wrong types under test


def test_d10_the_chunk_names_a_timeout_tool_timeout_error() -> None:
    tools = {"hang": create_tool(id="hang", description="", execute=_forever)}
    assert tool_error_name("tool hang timed out after 5 s", "hang", tools) == "ToolTimeoutError"
    assert tool_error_name("tool agent-slow timed out after 20 s", "agent-slow", tools) == "ToolTimeoutError"
    assert tool_error_name("tool other timed out after 5 s", "hang", tools) == "Error"
    assert tool_error_name("boom", "hang", tools) == "Error"
    assert tool_error_name("x", "nope", tools) == "Error"


async def test_d10_a_workflow_step_past_its_deadline_is_recorded_failed_and_no_later_step_runs() -> None:
    ran: list[str] = []

    def record(name: str) -> Any:
        async def step(_v: object) -> dict[str, str]:
            ran.append(name)
            return {"ran": name}

        return step

    wf = (create_workflow(id="w").then(Step(id="s1", execute=record("s1"))).then(Step(id="s2", execute=_forever))
          .then(Step(id="s3", execute=record("s3"))).commit())
    journal, writer = MemoryJournal(), Writer()
    with pytest.raises(WorkflowStepError, match=r"step s2 failed: ToolTimeoutError: step s2 timed out after 0.2 s"):
        await run_workflow(wf, {}, _ctx(default_timeout_s=0.2, writer=writer), journal)
    assert ran == ["s1"]
    assert {p: e.status for p, e in journal.entries.items()} == {"0/s1": "success", "1/s2": "failed"}
    results = [c["data"] for c in writer.chunks if c["type"] == "data-workflow-step-result"]
    assert [(r["stepId"], r["status"]) for r in results] == [("s1", "success"), ("s2", "failed")]
    # the workflow tool itself has no deadline: its steps have theirs
    from threadline.runtime.workflows import workflow_tool

    assert workflow_tool("w", wf).timeout_s is None
