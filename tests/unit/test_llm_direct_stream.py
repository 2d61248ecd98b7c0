"""The model stream read on each of ``llm_stream``'s three paths — the provider's SSE bytes
parsed here (``raw``), the openai SDK's chunk objects (``sdk``) and litellm's
``CustomStreamWrapper`` (``wrapper``) — gives the same chunks, the same outcome and the same
error kind for every stream shape the project knows; litellm callbacks switch to the wrapper."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import json

import litellm
import pytest

from threadline.errors import ModelCallError
from threadline.runtime.model import llm, llm_direct, llm_stream
from threadline.testing import model_script as ms
from threadline.testing.model_server import start_in_thread


def _sse(*events: object, done: bool = True, sep: str = "\n") -> str:
    """A raw SSE body: each event a JSON chunk (dicts get the usual id/object/model fields) or a
    literal string sent as is."""
    out = []
    for event in events:
        if isinstance(event, dict):
            event = "data: " + json.dumps({"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1,
                                           "model": "m", **event}) + sep + sep
        out.append(str(event))
    if done:
        out.append("data: [DONE]" + sep + sep)
    return "".join(out)


def _raw(body: str) -> ms.Script:
    return {"raw": body, "content_type": "text/event-stream"}


def _choice(delta: dict, finish: str | None = None) -> dict:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}

SCRIPTS: dict[str, ms.Script | list[ms.Script]] = {
    "text": ms.text("Hello there friend"),
    "tool": ms.tool_calls(ms.tool_call("lookup", {"id": "C-1"}, id="c1")),
    "parallel-tools": ms.tool_calls(ms.tool_call("lookup", {"id": "C-1", "deep": True}, id="c1", pieces=5),
                                    ms.tool_call("search", {"q": "split across pieces"}, id="c2", pieces=4)),
    "tool-no-args": ms.tool_calls(ms.tool_call("ping", {}, id="c1", pieces=1)),
    "tool-bad-json-args": ms.tool_calls({"name": "lookup", "arguments": '{"id": "C-', "pieces": 2, "id": "c1"}),
    "text-then-tool": ms.tool_calls(ms.tool_call("lookup", {"id": 1}, id="c1"), chunks=["Let me ", "check."]),
    "tool-finish-stop": ms.tool_calls(ms.tool_call("lookup", {"id": 1}, id="c1"), finish_reason="stop"),
    "tool-finish-length": ms.tool_calls(ms.tool_call("lookup", {"id": 1}, id="c1"), finish_reason="length"),
    "length": ms.text("a b c", finish_reason="length"),
    "content-filter": ms.text("a b", finish_reason="content_filter"),
    "function-call-finish": ms.text("a", finish_reason="function_call"),
    "unknown-finish": ms.text("a b", finish_reason="something_new"),
    "usage-null": ms.text("a b", usage=None),
    "usage-on-finish": ms.text("a b", usage_on_finish=True),
    "usage-given": ms.text("a b", usage={"prompt_tokens": 11, "completion_tokens": 7}),
    "empty-reply": ms.text(""),
    "in-band-429": ms.in_band_error(429, after=2, chunks=["Hel", "lo"]),
    "in-band-503": ms.in_band_error(503, "overloaded", after=1),
    "in-band-context": ms.in_band_error(400, ms.CONTEXT_OVERFLOW_MESSAGE, after=1),
    "in-band-before-first": ms.in_band_error(500, after=0),
    "disconnect": ms.mid_stream("disconnect", 3, chunks=["a", "b", "c", "d"]),
    "truncate": ms.mid_stream("truncate", 3, chunks=["a", "b", "c", "d"]),
    "malformed": ms.mid_stream("malformed", 2, chunks=["a", "b", "c"]),
    "abort-finish": ms.text("a b", finish_reason="abort"),
    "stall": ms.mid_stream("stall", 2, chunks=["a", "b", "c"], stall_seconds=4),
    "http-429": ms.rate_limit(retry_after=2),
    "http-context": ms.context_overflow(),
    "http-400": ms.error(400, "Invalid value for 'messages'."),
    "http-401": ms.error(401, "Incorrect API key provided.", type="invalid_request_error", code="invalid_api_key"),
    "http-403": ms.error(403, "Project does not have access."),
    "http-404": ms.error(404, "The model does not exist.", code="model_not_found"),
    "http-500": ms.error(500, "The server had an error."),
    "http-503": ms.error(503, "The engine is currently overloaded.", retry_after=1),
    "http-529-no-body": {"status": 529},
    "http-unprocessable": [ms.error(422, "Unrecognized request argument supplied: seed"), ms.text("asked again")],
    # Shapes the fake's scripts do not produce, sent as raw SSE bodies.
    "no-finish-reason": _raw(_sse(_choice({"role": "assistant", "content": "a"}), _choice({"content": "b"}))),
    "no-finish-no-done": _raw(_sse(_choice({"content": "a"}), done=False)),
    "no-done": _raw(_sse(_choice({"content": "a"}), _choice({}, "stop"), done=False)),
    "empty-choices-mid-stream": _raw(_sse(_choice({"content": "a"}), {"choices": []}, _choice({"content": "b"}),
                                          _choice({}, "stop"), {"choices": [], "usage": USAGE})),
    "choices-null": _raw(_sse(_choice({"content": "a"}), {"choices": None}, _choice({}, "stop"))),
    "refusal": _raw(_sse(_choice({"role": "assistant", "content": None, "refusal": "I can't help with that."}),
                         _choice({"refusal": " Sorry."}), _choice({}, "stop"), {"choices": [], "usage": USAGE})),
    "reasoning-content": _raw(_sse(_choice({"role": "assistant", "reasoning_content": "Think "}),
                                   _choice({"reasoning_content": "hard."}), _choice({"content": "Answer."}),
                                   _choice({}, "stop"))),
    "reasoning-field": _raw(_sse(_choice({"role": "assistant", "reasoning": "Think."}),
                                 _choice({"content": "Answer."}), _choice({}, "stop"))),
    "tool-without-id": _raw(_sse(
        _choice({"tool_calls": [{"index": 0, "type": "function", "function": {"name": "f", "arguments": "{\"a\""}}]}),
        _choice({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}), _choice({}, "tool_calls"))),
    "tool-name-late": _raw(_sse(
        _choice({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"arguments": ""}}]}),
        _choice({"tool_calls": [{"index": 0, "function": {"name": "late", "arguments": "{}"}}]}),
        _choice({}, "tool_calls"))),
    "parallel-interleaved": _raw(_sse(
        _choice({"tool_calls": [{"index": 0, "id": "a", "type": "function", "function": {"name": "f", "arguments": "{\"x\""}},
                                {"index": 1, "id": "b", "type": "function", "function": {"name": "g", "arguments": "{"}}]}),
        _choice({"tool_calls": [{"index": 1, "function": {"arguments": "}"}},
                                {"index": 0, "function": {"arguments": ": 2}"}}]}),
        _choice({}, "tool_calls"), {"choices": [], "usage": USAGE})),
    "tools-without-index": _raw(_sse(
        _choice({"tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                                {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{\"y\": 1}"}}]}),
        _choice({}, "tool_calls"))),
    "finish-with-content": _raw(_sse(_choice({"content": "all at once"}, "stop"))),
    "crlf-and-comments": _raw(": keep-alive\r\n\r\n" + _sse(_choice({"content": "a"}), ": ping",
                                                            "\n\n", _choice({}, "stop"), sep="\r\n")),
    "event-error": _raw(_sse(_choice({"content": "a"}),
                             'event: error\ndata: {"error": {"message": "Rate limit reached.", "code": 429}}\n\n',
                             done=False)),
    "non-object-data": _raw(_sse(_choice({"content": "a"}), "data: 42\n\n", _choice({}, "stop"))),
    # Stream normalisation (docs/decisions.md §20): one rule set on every path.
    "no-finish-tools": _raw(_sse(
        _choice({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}))),
    "no-finish-usage": _raw(_sse(_choice({"content": "a"}), {"choices": [], "usage": USAGE})),
    # Text that arrives in pieces (docs/decisions.md §181): joined before it is cleaned.
    "split-surrogates": ms.tool_calls(ms.tool_call("find", '{"q": "\U0001F600 x"}', id="c1", pieces=1),
                                      chunks=["a \U0001F600", "\U0001F601 b"], reasoning="think \U0001F914 done",
                                      split="surrogates"),
    "split-bytes": ms.text("h\u00e9llo \U0001F600 w\u00f6rld \u4e2d", split="bytes"),
    "half-at-the-end": _raw(_sse(_choice({"content": "a\ud83d"}), _choice({}, "stop"))),
    "no-finish-tools-no-done": _raw(_sse(
        _choice({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\""}}]}),
        done=False)),
    "same-index-new-ids": _raw(_sse(
        _choice({"tool_calls": [{"index": 0, "id": "g1", "type": "function",
                                 "function": {"name": "f", "arguments": "{\"a\""}}]}),
        _choice({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}),
        _choice({"tool_calls": [{"index": 0, "id": "g2", "type": "function",
                                 "function": {"name": "g", "arguments": "{\"b\": 2}"}}]}),
        _choice({}, "tool_calls"))),
    "same-index-one-chunk": _raw(_sse(
        _choice({"tool_calls": [{"index": 0, "id": "g1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                                {"index": 0, "id": "g2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]}),
        _choice({}, "stop"))),
    "id-repeated-on-fragments": _raw(_sse(
        _choice({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\""}}]}),
        _choice({"tool_calls": [{"index": 0, "id": "c1", "function": {"arguments": ": 1}"}}]}),
        _choice({}, "tool_calls"))),
    "args-empty": _raw(_sse(
        _choice({"tool_calls": [{"index": 0, "id": "p", "type": "function", "function": {"name": "ping", "arguments": ""}}]}),
        _choice({}, "tool_calls"))),
    "args-null": _raw(_sse(
        _choice({"tool_calls": [{"index": 0, "id": "p", "type": "function", "function": {"name": "ping", "arguments": None}}]}),
        _choice({}, "tool_calls"))),
    "args-absent": _raw(_sse(
        _choice({"tool_calls": [{"index": 0, "id": "p", "type": "function", "function": {"name": "ping"}}]}),
        _choice({}, "tool_calls"))),
    "usage-empty-delta": _raw(_sse(_choice({"content": "a"}), _choice({}, "stop"),
                                   {"choices": [{"index": 0, "delta": {}}], "usage": {**USAGE, "prompt_tokens_details": {
                                       "cached_tokens": 4}, "completion_tokens_details": {"reasoning_tokens": 2}}})),
    "usage-details-on-finish": _raw(_sse(_choice({"content": "a"}), {**_choice({}, "stop"), "usage": {
        **USAGE, "prompt_tokens_details": {"cached_tokens": 3}}})),
    "usage-details-choices-empty": _raw(_sse(_choice({"content": "a"}), _choice({}, "stop"), {"choices": [], "usage": {
        **USAGE, "completion_tokens_details": {"reasoning_tokens": 1}}})),
    "empty-body": {"raw": "", "content_type": "text/event-stream"},
    "done-only": _raw(_sse()),
    "non-sse-json": {"raw": json.dumps({"id": "x", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}),
        "content_type": "application/json"},
    "non-sse-html": {"raw": "<html><body>Bad gateway</body></html>", "content_type": "text/html"},
    "nan-in-logprobs": _raw(_sse({"choices": [{"index": 0, "delta": {"content": "a"}, "logprobs": {"x": float("nan")},
                                               "finish_reason": None}]}, _choice({}, "stop"))),
}
PATHS = ("raw", "sdk", "wrapper")
WRAPPER_FINISH = {"unknown-finish": "stop"}
"""Where litellm's wrapper decides the finish reason differently: it turns a finish reason it does
not know into "stop" (with a warning); read directly it is "other"."""


@pytest.fixture(scope="module")
def server():
    srv = start_in_thread()
    yield srv
    srv.stop()


async def _run(server, name: str, path: str, monkeypatch: pytest.MonkeyPatch):
    original = llm_stream.reader
    taken: list[str] = []
    sent: list[bool] = []
    prepare = llm_direct.prepare

    def direct_or_not(kwargs):
        request = prepare(kwargs) if path == "direct" else None
        sent.append(request is not None)
        return request

    def forced(response):
        natural = original(response)
        taken.append(natural)
        return "wrapper" if path == "wrapper" else ("sdk" if natural == "raw" and path == "sdk" else natural)

    monkeypatch.setattr(llm_stream, "reader", forced)
    monkeypatch.setattr(llm_direct, "prepare", direct_or_not)
    model = f"threadline-direct-{name}-{path}"
    await ms.ModelScript(server.url).aqueue(SCRIPTS[name], model=model)
    outcome, chunks, error = llm.ModelOutcome(), [], None
    try:
        async for chunk in llm.stream_model(model=f"openai/{model}", messages=[{"role": "user", "content": "hi"}],
                                            tools=None, tool_choice=None, model_settings=None, provider_options=None,
                                            api_base=server.api_base, timeout_s=2.0, outcome=outcome):
            chunks.append(chunk)
    except ModelCallError as exc:
        error = (exc.kind, exc.status_code, exc.retryable, exc.retry_after_s)
    finally:
        monkeypatch.setattr(llm_stream, "reader", original)
        monkeypatch.setattr(llm_direct, "prepare", prepare)
    assert sent == [path == "direct"], sent  # sent by Threadline itself exactly on the direct path
    if path == "direct":
        assert taken == [] or name == "http-unprocessable", taken  # litellm never opened it
    else:
        assert taken in ([], ["raw"]), taken  # every stream of the fake is raw-readable (none when the call failed)
    return chunks, (outcome.text, outcome.tool_calls, outcome.finish_reason, outcome.usage,
                    outcome.raw_finish_reason), error


@pytest.mark.parametrize("name", sorted(SCRIPTS))
async def test_every_path_gives_the_same_chunks_and_outcome(server, name: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    raw, sdk, wrapper, direct = [await _run(server, name, path, monkeypatch) for path in (*PATHS, "direct")]
    assert raw == sdk
    assert direct == raw
    # the wrapper reports its own normalised raw finish reason (e.g. tool_calls for stop)
    chunks, (text, calls, finish, usage, _), error = raw
    w_chunks, (w_text, w_calls, w_finish, w_usage, _), w_error = wrapper
    assert (chunks, text, calls, usage, error) == (w_chunks, w_text, w_calls, w_usage, w_error)
    assert w_finish == WRAPPER_FINISH.get(name, finish)


async def test_the_shapes_are_read_as_expected(server, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spot checks that the parity above is parity of the right thing."""
    chunks, (text, calls, finish, usage, _), error = await _run(server, "parallel-tools", "raw", monkeypatch)
    assert error is None and text == "" and finish == "tool-calls"
    assert [c["args"] for c in calls] == [{"id": "C-1", "deep": True}, {"q": "split across pieces"}]
    assert sum(c["type"] == "tool-call-delta" for c in chunks) == 9
    assert usage is not None and usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"]
    chunks, (text, _, finish, usage, _), error = await _run(server, "reasoning-content", "raw", monkeypatch)
    assert [c["payload"]["text"] for c in chunks if c["type"] == "reasoning-delta"] == ["Think ", "hard."]
    assert (text, finish, usage, error) == ("Answer.", "stop", None, None)
    _, (text, _, finish, usage, _), _ = await _run(server, "empty-choices-mid-stream", "raw", monkeypatch)
    assert (text, finish, usage) == ("ab", "stop", {"inputTokens": 5, "outputTokens": 3, "totalTokens": 8})
    _, (_, calls, _, _, _), _ = await _run(server, "tool-bad-json-args", "raw", monkeypatch)
    assert calls[0]["args"] == {"__raw": '{"id": "C-'}
    assert (await _run(server, "content-filter", "raw", monkeypatch))[1][2] == "content-filter"
    assert (await _run(server, "in-band-429", "raw", monkeypatch))[2] == ("rate_limit", 429, True, None)
    _, (text, _, finish, _, raw_finish), error = await _run(server, "no-finish-reason", "raw", monkeypatch)
    assert (text, finish, raw_finish, error) == ("ab", "stop", None, None)  # accepted, reason inferred (§20)
    _, (_, calls, finish, _, _), _ = await _run(server, "tools-without-index", "raw", monkeypatch)
    assert [(c["toolCallId"], c["args"]) for c in calls] == [("a", {}), ("b", {"y": 1})] and finish == "tool-calls"


@pytest.mark.parametrize("path", PATHS)
async def test_issue_15_rules_on_every_path(server, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/decisions.md §20, read on each path (the parity test compares the paths; this pins
    what they agree on)."""
    async def run(name: str):
        return await _run(server, name, path, monkeypatch)

    for name in ("no-finish-tools", "no-finish-reason", "no-finish-usage"):  # [DONE] says it ended
        _, (_, calls, finish, _, _), error = await run(name)
        assert error is None, (name, error)
        assert finish == ("tool-calls" if calls else "stop"), name
    for name in ("no-finish-no-done", "truncate", "no-finish-tools-no-done"):  # it never said so
        chunks, (_, calls, _, _, _), error = await run(name)
        assert error == ("stream_interrupted", None, True, None), (name, error)
        assert calls == [] and not [c for c in chunks if c["type"] == "tool-call"], name
    _, (_, calls, finish, _, _), _ = await run("same-index-new-ids")
    assert [(c["toolCallId"], c["toolName"], c["args"]) for c in calls] == [("g1", "f", {"a": 1}), ("g2", "g", {"b": 2})]
    _, (_, calls, _, _, _), _ = await run("same-index-one-chunk")
    assert [c["toolCallId"] for c in calls] == ["g1", "g2"]
    _, (_, calls, _, _, _), _ = await run("id-repeated-on-fragments")
    assert [(c["toolCallId"], c["args"]) for c in calls] == [("c1", {"a": 1})]
    for name in ("args-empty", "args-null", "args-absent", "tool-no-args"):
        _, (_, calls, finish, _, _), error = await run(name)
        assert error is None and finish == "tool-calls" and calls[0]["args"] == {}, name
    assert (await run("usage-empty-delta"))[1][3] == {"inputTokens": 5, "outputTokens": 3, "totalTokens": 8,
                                                      "cachedInputTokens": 4, "reasoningTokens": 2}
    assert (await run("usage-details-on-finish"))[1][3] == {"inputTokens": 5, "outputTokens": 3, "totalTokens": 8,
                                                            "cachedInputTokens": 3}
    assert (await run("usage-details-choices-empty"))[1][3] == {"inputTokens": 5, "outputTokens": 3,
                                                                "totalTokens": 8, "reasoningTokens": 1}
    for name in ("empty-body", "done-only", "non-sse-json", "non-sse-html"):
        assert (await run(name))[2] == ("bad_response", 200, True, None), name
    chunks, _, error = await run("disconnect")
    assert error == ("stream_interrupted", None, True, None)
    assert [c["payload"]["text"] for c in chunks if c["type"] == "text-delta"] == ["a", "b", "c"]


@pytest.mark.parametrize("path", PATHS)
async def test_text_in_pieces_is_joined_before_it_is_cleaned(server, path: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A character cut between two events (UTF-16 halves, escaped) or two network reads (UTF-8
    bytes) is one character on every path, in text, reasoning and tool-call arguments (§181)."""
    chunks, (text, calls, finish, _, _), error = await _run(server, "split-surrogates", path, monkeypatch)
    assert error is None and text == "a \U0001F600\U0001F601 b" and finish == "tool-calls"
    deltas = [c["payload"]["text"] for c in chunks if c["type"] == "text-delta"]
    assert "".join(deltas) == text and "\ufffd" not in text
    assert "".join(c["payload"]["text"] for c in chunks if c["type"] == "reasoning-delta") == "think \U0001F914 done"
    assert calls[0]["args"] == {"q": "\U0001F600 x"}
    assert "".join(c["payload"]["argsTextDelta"] for c in chunks if c["type"] == "tool-call-delta") == \
        '{"q": "\U0001F600 x"}'
    _, (text, _, _, _, _), error = await _run(server, "split-bytes", path, monkeypatch)
    assert (text, error) == ("h\u00e9llo \U0001F600 w\u00f6rld \u4e2d", None)
    chunks, (text, _, _, _, _), error = await _run(server, "half-at-the-end", path, monkeypatch)
    assert (text, error) == ("a\ufffd", None)  # a half never completed is still replaced


def test_a_litellm_callback_turns_the_wrapper_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import openai
    from openai.types.chat import ChatCompletionChunk

    stream = object.__new__(openai.AsyncStream)
    stream._cast_to, stream._options, stream._decoder = ChatCompletionChunk, None, llm_stream._SDK_DECODER()

    class Response:
        completion_stream = stream

    stream.response = type("R", (), {"aiter_bytes": lambda self: iter(())})()
    assert llm_stream.reader(Response()) == "raw"
    stream._cast_to = dict
    assert llm_stream.reader(Response()) == "sdk"
    stream._cast_to = ChatCompletionChunk
    monkeypatch.setattr(litellm, "success_callback", ["langfuse"])
    assert llm_stream.reader(Response()) == "wrapper"


async def test_the_anthropic_dialect_follows_the_same_rules(server) -> None:
    """The Anthropic dialect (always litellm's wrapper): a cut-off is ``stream_interrupted``;
    calls without arguments are ``{}``; usage is integers."""
    async def run(script: ms.Script):
        await ms.ModelScript(server.url).aqueue(script, model="threadline-anthropic-rules")
        outcome, error = llm.ModelOutcome(), None
        try:
            async for _ in llm.stream_model(model="anthropic/threadline-anthropic-rules",
                                            messages=[{"role": "user", "content": "hi"}], tools=None,
                                            tool_choice=None, model_settings=None, provider_options=None,
                                            api_base=server.api_base, timeout_s=2.0, outcome=outcome):
                pass
        except ModelCallError as exc:
            error = (exc.kind, exc.retryable)
        return outcome, error

    _, error = await run(ms.mid_stream("disconnect", 3, chunks=["a", "b", "c", "d"]))
    assert error == ("stream_interrupted", True)
    outcome, error = await run(ms.tool_calls(ms.tool_call("ping", {}, id="c1"), ms.tool_call("f", {"a": 1}, id="c2")))
    assert error is None and outcome.finish_reason == "tool-calls"
    assert [(c["toolCallId"], c["args"]) for c in outcome.tool_calls] == [("c1", {}), ("c2", {"a": 1})]
    assert outcome.usage is not None and all(type(v) is int for v in outcome.usage.values())


async def test_an_unreachable_provider_is_the_same_error_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing listens at the base URL: error kind ``connection`` (not ``server_error``, status 500,
    as litellm reports it), the same on the direct path as through litellm."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once closed: nothing listens there
    prepare = llm_direct.prepare
    got = {}
    for direct in (False, True):
        monkeypatch.setattr(llm_direct, "prepare", prepare if direct else (lambda kwargs: None))
        with pytest.raises(ModelCallError) as caught:
            async for _ in llm.stream_model(model="openai/threadline-nowhere", messages=[{"role": "user", "content": "hi"}],
                                            tools=None, tool_choice=None, model_settings=None, provider_options=None,
                                            api_base=f"http://127.0.0.1:{port}/v1", timeout_s=2.0,
                                            outcome=llm.ModelOutcome()):
                pass
        got[direct] = (caught.value.kind, caught.value.status_code, caught.value.retryable)
    # litellm reports it as a 500; it is a connection that never got an answer
    assert got[True] == got[False] == ("connection", None, True), got
