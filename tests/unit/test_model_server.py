"""Self-tests of the fake model server, driven through litellm (its scripting contract: errors,
delays, in-band errors, disconnects).

One server per module, on a free port in a background thread. Each test uses its own model
name, so the per-model FIFOs keep tests apart without resets.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import httpx
import litellm
import pytest
from litellm.exceptions import MidStreamFallbackError

from threadline.testing import model_script as ms
from threadline.testing.model_server import start_in_thread

litellm.suppress_debug_info = True
USER = [{"role": "user", "content": "ping the fake"}]


@pytest.fixture(scope="module")
def server():
    srv = start_in_thread()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def fake(server) -> ms.ModelScript:
    return ms.ModelScript(server.url)


@pytest.fixture
def model(request) -> str:
    return request.node.name.replace("[", "-").strip("]")


async def call(server, model: str, stream: bool = True, **kwargs):
    kwargs.setdefault("messages", USER)
    return await litellm.acompletion(model=f"openai/{model}", api_base=server.api_base, api_key="fake",
                                     stream=stream, max_retries=0, num_retries=0, **kwargs)


async def collect(server, model: str, **kwargs) -> list:
    return [chunk async for chunk in await call(server, model, **kwargs)]


def content(chunks) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


async def test_streams_text(server, fake, model):
    fake.queue(ms.text("Hello brave new world"), model=model)
    chunks = await collect(server, model)
    assert content(chunks) == "Hello brave new world"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 4
    assert chunks[-1].choices[0].finish_reason == "stop"


async def test_default_echo_reply(server, model):
    chunks = await collect(server, model, messages=[{"role": "user", "content": "first"},
                                                    {"role": "assistant", "content": "ok"},
                                                    {"role": "user", "content": "tell me more"}])
    assert content(chunks) == "You said: tell me more"


async def test_non_stream_text_and_tool_call(server, fake, model):
    await fake.aqueue([ms.text("plain"), ms.tool_calls(ms.tool_call("lookup", {"q": "x"}, id="call_1"))], model=model)
    first = await call(server, model, stream=False)
    assert first.choices[0].message.content == "plain"
    second = await call(server, model, stream=False)
    assert second.choices[0].finish_reason == "tool_calls"
    assert second.choices[0].message.tool_calls[0].id == "call_1"
    assert json.loads(second.choices[0].message.tool_calls[0].function.arguments) == {"q": "x"}


async def test_parallel_tool_call_fragments_rebuilt(server, fake, model):
    args_a = {"city": "Paris", "units": "metric", "days": [1, 2, 3]}
    fake.queue(ms.tool_calls(ms.tool_call("weather", args_a, pieces=5),
                             ms.tool_call("clock", '{"tz": "Europe/Paris"}', pieces=4)), model=model)
    chunks = await collect(server, model)
    fragments = [c for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert len(fragments) == 9
    built = litellm.stream_chunk_builder(chunks, messages=USER)
    calls = built.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["weather", "clock"]
    assert json.loads(calls[0].function.arguments) == args_a
    assert json.loads(calls[1].function.arguments) == {"tz": "Europe/Paris"}
    assert built.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("on_finish", [False, True])
async def test_usage_passthrough(server, fake, model, on_finish):
    fake.queue(ms.text("counted", usage={"prompt_tokens": 42, "completion_tokens": 17},
                       usage_on_finish=on_finish), model=model)
    chunks = await collect(server, model, stream_options={"include_usage": True})
    usage = chunks[-1].usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (42, 17, 59)


async def test_usage_null_chunks_match_openai(server, fake, model):
    fake.queue(ms.text("a b", usage={"prompt_tokens": 42, "completion_tokens": 17}), model=model)
    body = {"model": model, "stream": True, "stream_options": {"include_usage": True}, "messages": USER}
    async with httpx.AsyncClient() as client:
        response = await client.post(server.api_base + "/chat/completions", json=body)
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    assert response.text.rstrip().endswith("data: [DONE]")
    assert all(e["usage"] is None for e in events[:-1])
    assert events[-1]["choices"] == [] and events[-1]["usage"]["prompt_tokens"] == 42


OVERFLOW_CODE_ONLY = ms.error(400, "Your input is way too big.", code="context_length_exceeded")
HTTP_ERRORS = {
    "context-overflow": (ms.context_overflow(), litellm.ContextWindowExceededError, 400),
    "code-only-400": (OVERFLOW_CODE_ONLY, litellm.BadRequestError, 400),
    "not-found": (ms.error(404, "The model does not exist.", code="model_not_found"), litellm.NotFoundError, 404),
    "413-too-large": (ms.error(413, "Request too large for gpt-4o on tokens per min."), litellm.RateLimitError, 429),
    "rate-limit": (ms.rate_limit(retry_after=7), litellm.RateLimitError, 429),
    "500": (ms.error(500), litellm.InternalServerError, 500),
    "503": (ms.error(503), litellm.ServiceUnavailableError, 503),
    "529": (ms.error(529), litellm.APIError, 529),
}


@pytest.mark.parametrize("case", HTTP_ERRORS)
async def test_http_errors(server, fake, model, case):
    script, exc_type, status = HTTP_ERRORS[case]
    fake.queue(script, model=model)
    with pytest.raises(exc_type) as info:
        await call(server, model)
    assert info.value.status_code == status
    if case == "code-only-400":
        assert not isinstance(info.value, litellm.ContextWindowExceededError)
    if case == "503":
        assert not isinstance(info.value, litellm.InternalServerError)
    if case == "rate-limit":
        assert info.value.response.headers["retry-after"] == "7"


MID_STREAM = {
    "disconnect": (ms.mid_stream("disconnect", 2), 500, litellm.APIConnectionError),
    "malformed": (ms.mid_stream("malformed", 2), 500, litellm.APIConnectionError),
    "truncate": (ms.mid_stream("truncate", 2), 500, None),
    "error-event": (ms.mid_stream("error_event", 2), 500, litellm.APIConnectionError),
    "in-band-400": (ms.mid_stream("error_event", 2, error_event={"error": {"code": 400, "message": "bad"}}), 500, None),
    # litellm reads the in-band status from the *message* ("rate limit" or a bare 429), not from "code"
    "in-band-429": (ms.in_band_error(429, after=2), 429, litellm.RateLimitError),
    "in-band-429-message-only": (ms.in_band_error(429, "slow down", after=2), 500, litellm.APIConnectionError),
}


@pytest.mark.parametrize("case", MID_STREAM)
async def test_mid_stream_failures(server, fake, model, case):
    script, status, original = MID_STREAM[case]
    fake.queue({**script, "text": "one two three four"}, model=model)
    seen = []
    with pytest.raises(MidStreamFallbackError) as info:
        async for chunk in await call(server, model):
            seen.append(chunk)
    assert info.value.status_code == status
    assert content(seen) == "one two"
    if original is not None:
        assert isinstance(info.value.original_exception, original)


async def test_in_band_context_overflow_raised_directly(server, fake, model):
    event = {"error": {"message": ms.CONTEXT_OVERFLOW_MESSAGE, "type": "invalid_request_error"}}
    fake.queue(ms.mid_stream("error_event", 1, error_event=event), model=model)
    with pytest.raises(litellm.ContextWindowExceededError):
        await collect(server, model)


async def test_slow_first_token_is_measurable(server, fake, model):
    fake.queue(ms.text("late reply", ttft=0.4), model=model)
    started = time.monotonic()
    stream = await call(server, model)
    first_at = None
    async for chunk in stream:
        if first_at is None and chunk.choices and chunk.choices[0].delta.content:
            first_at = time.monotonic() - started
    assert 0.35 <= first_at < 1.5


async def test_chunk_delay_spaces_chunks(server, fake, model):
    fake.queue(ms.text("a b c d", chunk_delay=0.1), model=model)
    started = time.monotonic()
    assert content(await collect(server, model)) == "a b c d"
    assert time.monotonic() - started >= 0.4  # 4 gaps: between 4 content chunks and the finish chunk


@pytest.mark.parametrize("script", [{"ttft": 5}, {"delay": 3600}, {"fail": "stall", "fail_after": 1}],
                         ids=["ttft", "hang", "stall"])
async def test_read_timeouts(server, fake, model, script):
    fake.queue(script, model=model)
    started = time.monotonic()
    with pytest.raises(litellm.Timeout):
        await collect(server, model, timeout=0.3)
    assert time.monotonic() - started < 1.5


async def test_journal_records_requests(server, fake, model):
    fake.queue(ms.text("journaled"), model=model)
    await collect(server, model, messages=[{"role": "user", "content": "remember me"}], temperature=0.5)
    [entry] = await fake.arequests(model=model)
    assert entry["model"] == model and entry["stream"] is True and entry["scripted"] is True
    assert entry["body"]["messages"] == [{"role": "user", "content": "remember me"}]
    assert entry["body"]["temperature"] == 0.5
    assert entry["headers"]["authorization"] == "<redacted>"
    assert entry["path"] == "/v1/chat/completions" and entry["time"] <= time.time()


async def test_model_scoped_fifos_do_not_interfere(server, fake, model):
    a, b, other = model + "-a", model + "-b", model + "-other"
    fake.queue([ms.text("A1"), ms.text("A2")], model=a)
    fake.queue(ms.text("B1", times=2), model=b)
    fake.queue({"text": "G1", "model": other})
    assert content(await collect(server, b)) == "B1"
    assert content(await collect(server, a)) == "A1"
    assert content(await collect(server, b)) == "B1"
    assert content(await collect(server, a)) == "A2"
    assert content(await collect(server, b)) == "You said: ping the fake"
    assert content(await collect(server, other)) == "G1"
    assert len(fake.requests(model=b)) == 3


async def test_admin_api(server, fake, model):
    with pytest.raises(ValueError, match="unknown script fields"):
        fake.queue({"txt": "typo"}, model=model)
    fake.queue([ms.text("x"), ms.text("y")], model=model)
    fake.clear(model=model)
    assert content(await collect(server, model)) == "You said: ping the fake"
    async with httpx.AsyncClient(base_url=server.url) as client:
        assert (await client.get("/_fake/health")).json()["status"] == "ok"
        ids = [m["id"] for m in (await client.get("/v1/models")).json()["data"]]
        assert model in ids
        raw = {"scripts": [{"raw": "not json at all", "content_type": "application/json"}], "model": model}
        assert (await client.post("/_fake/script", json=raw)).status_code == 200
    chunks = await collect(server, model)  # litellm: garbage 200 to a stream is a silent empty "stop"
    assert content(chunks) == ""


async def test_many_chunks_stream_quickly(server, fake, model):
    fake.queue({"chunks": ["tok "] * 5000}, model=model)
    started = time.monotonic()
    body = {"model": model, "stream": True, "messages": USER}
    async with httpx.AsyncClient() as client:
        response = await client.post(server.api_base + "/chat/completions", json=body)
    assert response.text.count('"content":"tok "') == 5000
    assert time.monotonic() - started < 2


def test_process_exits_on_sigterm_with_hanging_request():
    proc = subprocess.Popen([sys.executable, "-m", "threadline.testing.model_server", "--port", "0"],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = proc.stdout.readline()
        assert line.startswith("model-server listening on http://127.0.0.1:")
        fake = ms.ModelScript(line.split()[-1])
        fake.queue({"delay": 3600})

        def hang() -> None:
            with contextlib.suppress(httpx.HTTPError):
                httpx.post(fake.base_url + "/v1/chat/completions", json={"model": "m", "messages": USER}, timeout=10)

        threading.Thread(target=hang, daemon=True).start()
        while not fake.requests():
            time.sleep(0.02)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=5)
        assert time.monotonic() - started < 2
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_requests_per_second_limit_answers_429_and_journals_it(server, fake):
    fake.reset()
    fake.limit("limited-model", 2)
    body = {"model": "limited-model", "messages": [{"role": "user", "content": "hi"}]}
    # three at once (sent one after the other, a loaded machine can spread them over a second)
    with ThreadPoolExecutor(3) as pool:
        codes = list(pool.map(lambda _: httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=5).status_code,
                              range(3)))
    assert sorted(codes) == [200, 200, 429]  # three within one second: one is over
    journal = fake.requests(model="limited-model")
    assert sorted(bool(r.get("limited")) for r in journal) == [False, False, True]
    fake.limit("limited-model", None)
    assert httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=5).status_code == 200
    assert httpx.post(f"{server.url}/_fake/limit", json={"model": "x", "rps": -1}, timeout=5).status_code == 400


def test_the_anthropic_dialect_answers_messages_with_events(server, fake):
    fake.reset()
    fake.queue([ms.text("Hi there", reasoning="thinking hard")], model="claude-x")
    body = {"model": "claude-x", "max_tokens": 10, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    response = httpx.post(f"{server.url}/v1/messages", json=body, timeout=5)
    events = [line.removeprefix("event: ") for line in response.text.splitlines() if line.startswith("event: ")]
    assert events[0] == "message_start" and events[-2:] == ["message_delta", "message_stop"]
    assert '"thinking_delta"' in response.text and '"text_delta"' in response.text
    plain = httpx.post(f"{server.url}/v1/messages", json={**body, "stream": False}, timeout=5)
    assert plain.json()["content"][0] == {"type": "text", "text": "You said: hi"}
