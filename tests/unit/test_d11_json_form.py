"""D11, the rule as pure logic (decision 217): a value user code hands back is brought to plain
JSON once, where it is handed over — a documented coercion, or :class:`NotSerialisableError`
naming the type and the path — and every way a tool call's value arrives goes through it: the
tool's return, a ``before_tool_call`` skip's ``output``, a ``data-*`` chunk the tool writes, a
workflow step's output. A value that cannot be encoded is the call's error, never an exception
that escapes the tool runner (the worker would hand the step back and run the tool again)."""

from __future__ import annotations

import datetime
import enum
import uuid
from dataclasses import dataclass
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import BaseModel

from tests.unit.test_workflows import Writer
from threadline.errors import NotSerialisableError, ToolCallError
from threadline.runtime.json_form import json_form
from threadline.runtime.step.tools import encoded, run_tool_call
from threadline.runtime.tools import ToolContext, ToolHooks, create_tool
from threadline.runtime.workflows import MemoryJournal, Step, create_workflow, run_workflow
from threadline.transient import is_transient


class Colour(enum.Enum):
    RED = "red"


@dataclass
class Point:
    x: int
    y: Decimal


class Model(BaseModel):
    when: datetime.date


@pytest.mark.parametrize(("value", "expected"), [
    pytest.param({"amount": Decimal("12.50")}, {"amount": "12.50"}, id="decimal-as-its-digits"),
    pytest.param({"ids": {3, 1, 2}}, {"ids": [1, 2, 3]}, id="set-sorted"),
    pytest.param(frozenset({"b", "a"}), ["a", "b"], id="frozenset-sorted"),
    pytest.param({1, "a"}, ["a", 1], id="mixed-set-by-json-text"),  # b'"a"' < b'1'
    pytest.param(b"\x00\xff", {"base64": "AP8="}, id="bytes-base64"),
    pytest.param({"n": 2**70}, {"n": "1180591620717411303424"}, id="int-beyond-64-bits-as-string"),
    pytest.param([2**64 - 1, -(2**63)], [2**64 - 1, -(2**63)], id="ints-within-64-bits-kept"),
    pytest.param([-(2**63) - 1], [str(-(2**63) - 1)], id="negative-beyond-64-bits"),
    pytest.param({"x": float("nan"), "y": float("inf"), "z": 1.5}, {"x": None, "y": None, "z": 1.5}, id="nan-null"),
    pytest.param(datetime.datetime(2026, 12, 6, 12, 0, tzinfo=datetime.UTC), "2026-12-06T12:00:00+00:00", id="datetime"),
    pytest.param(uuid.UUID(int=1), "00000000-0000-0000-0000-000000000001", id="uuid"),
    pytest.param([Colour.RED, (1, 2)], ["red", [1, 2]], id="enum-value-tuple-array"),
    pytest.param(Point(1, Decimal("2")), {"x": 1, "y": "2"}, id="dataclass"),
    pytest.param(Model(when=datetime.date(2026, 1, 2)), {"when": "2026-01-02"}, id="pydantic"),
    pytest.param({2: "a", None: "b", True: "c", 1.5: "d", Colour.RED: "e"},
                 {"2": "a", "null": "b", "true": "c", "1.5": "d", "red": "e"}, id="json-keys"),
    pytest.param({"a": [1, "x", None, True, {"b": 2.0}]}, {"a": [1, "x", None, True, {"b": 2.0}]}, id="plain-kept"),
])
def test_d11_values_with_a_json_form_are_coerced_by_the_rule(value: object, expected: object) -> None:
    assert json_form(value) == expected
    assert json_form(json_form(value)) == json_form(value)  # the rule is idempotent


def _cycle() -> dict[str, Any]:
    inner: dict[str, Any] = {}
    inner["self"] = inner
    return {"a": [inner]}


@pytest.mark.parametrize(("value", "message"), [
    pytest.param(object(), "result not JSON-serialisable: object at $", id="object"),
    pytest.param({(1, 2): "x"}, "result not JSON-serialisable: tuple as a dict key at $", id="tuple-key"),
    pytest.param({"a": [1, {"b c": object()}]}, 'result not JSON-serialisable: object at $.a[1]["b c"]', id="path"),
    pytest.param({"f": len}, "result not JSON-serialisable: builtin_function_or_method at $.f", id="function"),
    pytest.param(_cycle(), "result not JSON-serialisable: dict inside itself at $.a[0].self", id="cycle"),
])
def test_d11_values_with_no_json_form_are_named_with_their_path(value: object, message: str) -> None:
    with pytest.raises(NotSerialisableError) as caught:
        json_form(value)
    assert str(caught.value) == message
    assert isinstance(caught.value, ToolCallError) and not is_transient(caught.value)


def test_d11_a_shared_value_is_not_a_cycle() -> None:
    shared = [1]
    assert json_form({"a": shared, "b": shared}) == {"a": [1], "b": [1]}


def _ctx(writer: Any = None) -> ToolContext:
    return ToolContext(tool_call_id="c1", run_id="run-1", thread_id="th-1", resource_id="res-1", agent_id="a",
                       step=0, idempotency_key="run-1:c1", writer=writer or SimpleNamespace())


async def _call(execute: Any, hooks: ToolHooks | None = None) -> tuple[object, str | None]:
    tool = create_tool(id="t", description="", execute=execute)
    return await run_tool_call(call={"toolName": "t", "toolCallId": "c1", "args": {}}, tools={"t": tool},
                               hooks=hooks or ToolHooks(), context=_ctx(), agent_meta={})


async def test_d11_a_tool_result_is_coerced_or_becomes_the_calls_error() -> None:
    seen: list[object] = []
    hooks = ToolHooks(after_tool_call=lambda ctx: seen.append((ctx.output, ctx.error)))
    assert await _call(lambda _a: {"amount": Decimal("1.10")}, hooks) == ({"amount": "1.10"}, None)
    assert await _call(lambda _a: {"o": object()}, hooks) == (None, "result not JSON-serialisable: object at $.o")
    assert seen == [({"amount": "1.10"}, None), (None, "result not JSON-serialisable: object at $.o")]


async def test_d11_a_skipping_hooks_output_goes_through_the_same_rule() -> None:
    def skip(output: object) -> ToolHooks:
        return ToolHooks(before_tool_call=lambda ctx: {"proceed": False, "output": output})

    assert await _call(lambda _a: "never", skip({"s": {2, 1}})) == ({"s": [1, 2]}, None)
    assert await _call(lambda _a: "never", skip(object())) == (None, "result not JSON-serialisable: object at $")


def test_d11_encoded_keeps_an_error_and_never_raises_for_the_value() -> None:
    assert encoded({"d": Decimal("3")}, None) == ({"d": "3"}, None)
    assert encoded(object(), None) == (None, "result not JSON-serialisable: object at $")
    assert encoded("ignored", "boom") == (None, "boom")


async def test_d11_a_workflow_step_output_is_coerced_and_a_refused_one_fails_the_step() -> None:
    ran: list[str] = []

    async def s1(_v: object) -> object:
        ran.append("s1")
        return {"when": Decimal("1.5")}

    async def s2(v: object) -> object:
        ran.append("s2")
        return {"after": v}

    wf = create_workflow(id="w").then(Step(id="s1", execute=s1)).then(Step(id="s2", execute=s2)).commit()
    journal = MemoryJournal()
    assert await run_workflow(wf, {}, _ctx(Writer()), journal) == {"after": {"when": "1.5"}}
    assert ran == ["s1", "s2"]
    assert (await journal.load())["0/s1"].output == {"when": "1.5"}

    bad = create_workflow(id="b").then(Step(id="s1", execute=lambda _v: object())).then(
        Step(id="s2", execute=s2)).commit()
    ran.clear()
    with pytest.raises(Exception, match=r"step s1 failed: NotSerialisableError: result not JSON-serialisable"):
        await run_workflow(bad, {}, _ctx(Writer()), MemoryJournal())
    assert ran == []
