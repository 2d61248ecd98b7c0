"""The fake model server's pairing validator: the pure checks for both dialects, and the server
refusing (400, the provider's wording) and counting an unpaired history."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from threadline.testing.model_script import ModelScript, text
from threadline.testing.model_server import RunningServer, start_in_thread
from threadline.testing.pairing import PAIRING_MESSAGE, anthropic_pairing_error, openai_pairing_error


def _call(*ids: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids]}


def _result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


USER = {"role": "user", "content": "hi"}
DONE = {"role": "assistant", "content": "done"}


@pytest.mark.parametrize("messages", [
    [USER],
    [{"role": "system", "content": "s"}, USER, _call("a"), _result("a"), DONE, USER],
    [USER, _call("a", "b"), _result("b"), _result("a"), DONE],
    [USER, _call("a"), _result("a"), _call("b"), _result("b")],
    "not a list",
])
def test_paired_openai_histories_pass(messages: Any) -> None:
    assert openai_pairing_error(messages) is None


@pytest.mark.parametrize(("messages", "names"), [
    ([USER, _call("a")], "a"),  # a call left open at the end
    ([USER, _call("a", "b"), _result("a"), DONE], "b"),  # one of two answered
    ([USER, _call("a"), USER, _result("a")], "a"),  # a user message between the call and its result
    ([USER, _result("x")], "'x'"),  # an orphan result
    ([USER, _call("a"), _result("a"), _result("a")], "already answered"),  # a result twice
    ([USER, _call("a"), _result("a"), DONE, _result("a")], "'a'"),  # a result after the block
])
def test_unpaired_openai_histories_fail(messages: list[dict[str, Any]], names: str) -> None:
    reason = openai_pairing_error(messages)
    assert reason is not None and reason.startswith(PAIRING_MESSAGE) and names in reason


def _use(*ids: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "tool_use", "id": i, "name": "f", "input": {}} for i in ids]}


def _results(*ids: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": i, "content": "ok"} for i in ids]}


def test_anthropic_pairing() -> None:
    assert anthropic_pairing_error([USER, _use("a", "b"), _results("a", "b"), DONE]) is None
    assert anthropic_pairing_error([USER, _use("a"), _results("a"), _use("b"), _results("b")]) is None
    assert "b" in (anthropic_pairing_error([USER, _use("a", "b"), _results("a")]) or "")
    assert "a" in (anthropic_pairing_error([USER, _use("a")]) or "")
    assert "x" in (anthropic_pairing_error([USER, _results("x")]) or "")
    assert anthropic_pairing_error([USER, _use("a"), USER, _results("a")]) is not None
    assert anthropic_pairing_error([USER, _use("a"), _results("a", "a")]) is not None


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    srv = start_in_thread()
    yield srv
    srv.stop()


@pytest.mark.parametrize(("path", "messages"), [
    ("/v1/chat/completions", [USER, _call("a")]),
    ("/v1/messages", [USER, _use("a")]),
])
def test_server_refuses_and_counts(server: RunningServer, path: str, messages: list[dict[str, Any]]) -> None:
    fake = ModelScript(server.url)
    fake.reset()
    fake.pairing(clear=True)
    fake.queue(text("kept for the next good request"))
    body = {"model": "m", "messages": messages, "max_tokens": 10}
    refused = httpx.post(server.url + path, json=body)
    assert refused.status_code == 400
    assert PAIRING_MESSAGE in refused.text
    assert fake.pairing()["count"] == 1
    assert fake.requests()[-1]["pairing_error"].startswith(PAIRING_MESSAGE)
    fake.reset()  # resetting scripts and the journal keeps the count
    assert fake.pairing(clear=True)["count"] == 1
    assert fake.pairing()["count"] == 0


def test_refused_request_takes_no_script(server: RunningServer) -> None:
    fake = ModelScript(server.url)
    fake.reset()
    fake.queue(text("scripted reply"))
    assert httpx.post(server.url + "/v1/chat/completions", json={"model": "m", "messages": [USER, _result("x")]}
                      ).status_code == 400
    ok = httpx.post(server.url + "/v1/chat/completions", json={"model": "m", "messages": [USER]})
    assert ok.json()["choices"][0]["message"]["content"] == "scripted reply"
    assert fake.pairing(clear=True)["count"] == 1
