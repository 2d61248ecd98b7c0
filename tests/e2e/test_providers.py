"""Real-provider behaviour against the fake provider: model-level retries (Retry-After honoured),
fallback models, error processors whose edits reach the retried request, retry announcements
(docs/models.md)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import uuid

import pytest

from tests.e2e.helpers import content, rows, run_row, run_stream
from threadline.client import ThreadlineClient
from threadline.client.client import RequestFailed
from threadline.testing import model_script as ms


def _texts(chunks: list[dict]) -> str:
    return "".join(c["payload"]["text"] for c in chunks if c["type"] == "text-delta")


def _prompt(request: dict) -> list[tuple[str, str]]:
    out = []
    for m in request["body"]["messages"]:
        body = m["content"] if isinstance(m["content"], str) else " ".join(p.get("text", "") for p in m["content"])
        out.append((m["role"], body))
    return out


async def test_transient_errors_are_retried_quietly_and_retry_after_is_honoured(services, settings, model):
    model.queue([ms.rate_limit(retry_after=1), {"status": 503}, ms.text("Hello there")],
                model="threadline-model-retry")
    _, chunks = await run_stream(settings, "model-retry", "greet me")
    requests = model.requests(model="threadline-model-retry")
    assert len(requests) == 3  # the default of two retries, all spent
    assert [r["body"]["messages"] for r in requests[1:]] == [requests[0]["body"]["messages"]] * 2
    assert requests[1]["time"] - requests[0]["time"] >= 1.0  # the provider's Retry-After was waited out
    assert [c[0] for c in content(chunks)] == ["text-delta", "text-delta", "finish"]  # no dead attempt, no error
    assert _texts(chunks) == "Hello there" and content(chunks)[-1] == ("finish", "stop")
    assert sum(1 for c in chunks if c["type"] == "step-start") == 1


async def test_retries_spent_fail_the_run_with_the_retry_after_on_the_error_chunk(services, settings, model):
    model.queue([ms.rate_limit(retry_after=0.2, times=3)], model="threadline-model-retry")
    _, chunks = await run_stream(settings, "model-retry", "x", options={"max_retries": 2})
    assert len(model.requests(model="threadline-model-retry")) == 3
    seq = content(chunks)
    assert seq[-2][0] == "error" and seq[-1] == ("finish", "error")
    assert seq[-2][1]["error"]["kind"] == "rate_limit" and seq[-2][1]["error"]["retry_after_s"] == 0.2
    # a call-level max_retries wins over the default
    model.queue([{"status": 500, "times": 5}], model="threadline-model-retry")
    _, chunks = await run_stream(settings, "model-retry", "x", options={"maxRetries": 0})
    assert len(model.requests(model="threadline-model-retry")) == 4
    assert content(chunks)[-2][1]["error"]["kind"] == "server_error"


async def test_a_fallback_model_takes_over_before_and_after_output(services, settings, model):
    model.queue([{"status": 500, "times": 2}], model="threadline-fb-primary")
    model.queue([ms.text("from the backup")], model="threadline-fb-backup")
    _, chunks = await run_stream(settings, "fallback", "hi")
    assert len(model.requests(model="threadline-fb-primary")) == 2  # max_retries=1 of the primary
    backup = model.requests(model="threadline-fb-backup")
    assert len(backup) == 1 and _prompt(backup[0])[-1] == ("user", "hi")
    assert [c[0] for c in content(chunks)] == ["text-delta"] * 3 + ["finish"]
    assert _texts(chunks) == "from the backup"

    model.reset()  # the primary dies mid-answer: its text is withdrawn, the backup answers
    model.queue([ms.in_band_error(500, "boom", after=2, chunks=["Hal", "f"])], model="threadline-fb-primary")
    model.queue([ms.text("whole")], model="threadline-fb-backup")
    _, chunks = await run_stream(settings, "fallback", "hi")
    seq = content(chunks)
    assert seq[:2] == [("text-delta", "Hal"), ("text-delta", "f")]
    assert seq[2][0] == "attempt-discarded" and seq[2][1]["reason"] == "fallback"
    assert seq[3:] == [("text-delta", "whole"), ("finish", "stop")]
    assert len(model.requests(model="threadline-fb-primary")) == 1  # output was streamed: no retry of that model


async def test_error_processor_edits_reach_the_retried_request(services, settings, model, cluster):
    thread = f"th-{uuid.uuid4().hex[:8]}"
    model.queue([ms.text("first answer")], model="threadline-trim-retry")
    await run_stream(settings, "trim-retry", "first question", thread=thread)
    model.queue([ms.context_overflow(), ms.text("ok")], model="threadline-trim-retry")
    _, chunks = await run_stream(settings, "trim-retry", "second question", thread=thread)
    failed, retried = model.requests(model="threadline-trim-retry")[1:]
    assert _prompt(failed) == [("user", "first question"), ("assistant", "first answer"),
                               ("user", "second question")]
    assert _prompt(retried) == [("user", "second question")]  # the processor's trim was sent
    seq = content(chunks)
    assert seq[0][0] == "attempt-discarded"
    assert {k: seq[0][1][k] for k in ("reason", "retryProcessorId", "retryReason", "retryMetadata")} == {
        "reason": "api-error", "retryProcessorId": "trim", "retryReason": "api-error: context_length_exceeded",
        "retryMetadata": {"dropped": 2}}
    assert seq[1:] == [("text-delta", "ok"), ("finish", "stop")]


async def test_a_processor_retry_is_announced_with_its_processor_reason_and_metadata(services, settings, model):
    model.queue([{"chunks": ["meh"]}, {"chunks": ["a much longer answer"]}], model="threadline-retrying")
    _, chunks = await run_stream(settings, "retrying", "x")
    marks = [c["payload"] for c in chunks if c["type"] == "attempt-discarded"]
    assert len(marks) == 1
    assert (marks[0]["retryProcessorId"], marks[0]["retryReason"], marks[0]["retryMetadata"]) == (
        "too-short", "too short", None)


async def test_a_rejected_or_missing_key_is_an_authentication_error_naming_the_variable(services, settings, model):
    model.queue([{"status": 401, "error": {"message": "Incorrect API key provided"}}], model="threadline-model-retry")
    _, chunks = await run_stream(settings, "model-retry", "x")
    assert len(model.requests(model="threadline-model-retry")) == 1  # not transient: never retried
    error = content(chunks)[-2][1]["error"]
    assert error["kind"] == "authentication" and error["statusCode"] == 401
    assert "Incorrect API key provided" in error["message"] and "set OPENAI_API_KEY" in error["message"]
    # google/gemini-2.5-pro with no key set: nothing is sent, the message names the variables
    _, chunks = await run_stream(settings, "google-no-key", "x")
    error = content(chunks)[-2][1]["error"]
    assert error["kind"] == "authentication" and content(chunks)[-1] == ("finish", "error")
    assert "GOOGLE_GENERATIVE_AI_API_KEY or GOOGLE_API_KEY" in error["message"]


async def test_the_anthropic_dialect_gets_litellms_translation(services, settings, model):
    model.queue([{"status": 429, "headers": {"retry-after": "0.1"}},
                 ms.tool_calls(ms.tool_call("weather", {"city": "Oslo"})), ms.text("Clear in Oslo.")],
                model="threadline-anthropic")
    _, chunks = await run_stream(settings, "anthropic-fake", "weather in Oslo?")
    requests = model.requests(model="threadline-anthropic")
    assert [r["path"] for r in requests] == ["/v1/messages"] * 3  # a 429 of Anthropic's is retried too
    first, last = requests[1]["body"], requests[2]["body"]
    assert first["system"] == [{"type": "text", "text": "Answer briefly."}]
    assert first["messages"] == [{"role": "user", "content": [{"type": "text", "text": "weather in Oslo?"}]}]
    assert [(t["name"], t["input_schema"]) for t in first["tools"]] == [
        ("weather", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})]
    assert first["stream"] is True and isinstance(first["max_tokens"], int)
    # the tool call and its result went back as Anthropic blocks
    call_block = last["messages"][1]["content"][-1]
    assert call_block["type"] == "tool_use" and call_block["name"] == "weather" and call_block["input"] == {"city": "Oslo"}
    result_block = last["messages"][2]["content"][0]
    assert result_block["type"] == "tool_result" and result_block["tool_use_id"] == call_block["id"]
    assert "clear" in json.dumps(result_block["content"])
    seq = content(chunks)
    assert seq[0][0] == "tool-call" and seq[0][1]["args"] == {"city": "Oslo"}
    assert seq[1][0] == "tool-result" and seq[1][1]["result"] == {"city": "Oslo", "sky": "clear"}
    assert _texts(chunks) == "Clear in Oslo." and seq[-1] == ("finish", "stop")
    finish = [c for c in chunks if c["type"] == "step-finish"]
    assert finish[0]["payload"]["stepResult"]["reason"] == "tool-calls"


async def test_provider_options_of_instructions_messages_signals_calls_and_steps_reach_the_provider(
        services, settings, model):
    thinking = {"anthropic": {"thinking": {"type": "enabled", "budgetTokens": 2048}}}
    cache = {"anthropic": {"cacheControl": {"type": "ephemeral"}}}
    model.queue([ms.text("ok"), ms.text("ok again")], model="claude-sonnet-4-5-threadline-cache")
    thread = f"th-{uuid.uuid4().hex[:8]}"
    await run_stream(settings, "cached-claude", {"contents": "the big document", "provider_options": cache},
                     thread=thread, options={"providerOptions": thinking})
    await run_stream(settings, "cached-claude", "and now?", thread=thread,
                     options={"providerOptions": thinking, "requestContext": {"think_hard": True}})
    first, second = (r["body"] for r in model.requests(model="claude-sonnet-4-5-threadline-cache"))
    assert first["system"] == [{"type": "text", "text": "The long, stable policy text.",
                                "cache_control": {"type": "ephemeral"}},
                               {"type": "text", "text": "Answer briefly."}]
    assert first["messages"][0]["content"] == [{"type": "text", "text": "the big document",
                                                "cache_control": {"type": "ephemeral"}}]
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 2048}  # the call's options
    assert second["thinking"] == {"type": "enabled", "budget_tokens": 8192}  # a processor's step options win
    assert second["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}  # kept with the message
    assert "cache_control" not in json.dumps(second["messages"][-1])  # the plain message has none
    # OpenAI's names, and a signal's options (only the called provider's entry is used)
    model.queue([ms.text("fine")], model="threadline-reasoning")
    await run_stream(settings, "reasoning-gpt", {"contents": "think", "provider_options": cache},
                     options={"providerOptions": {"openai": {"reasoningEffort": "high", "parallelToolCalls": False},
                                                  "anthropic": {"thinking": {"type": "enabled"}}}})
    body = model.requests(model="threadline-reasoning")[0]["body"]
    assert body["reasoning_effort"] == "high" and body["parallel_tool_calls"] is False
    assert "thinking" not in body and "reasoningEffort" not in body and "cache_control" not in json.dumps(body)


PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(64))).decode()
PDF = base64.b64encode(b"%PDF-1.4 a small document").decode()


async def test_images_and_documents_reach_the_model_in_each_providers_shape(services, settings, model, cluster):
    parts = [{"type": "text", "text": "What is in these?"}, {"type": "image", "image": PNG, "mediaType": "image/png"},
             {"type": "file", "data": PDF, "mimeType": "application/pdf", "filename": "terms.pdf"},
             {"type": "image", "image": "https://example.com/cat.png"}]
    model.queue([ms.text("A cat and some terms.")], model="threadline-anthropic")
    _, chunks = await run_stream(settings, "anthropic-fake", parts)
    assert _texts(chunks) == "A cat and some terms."
    sent = model.requests(model="threadline-anthropic")[0]["body"]["messages"][0]["content"]
    assert sent == [{"type": "text", "text": "What is in these?"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                    {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}]
    # OpenAI's shape; a big image (over the record limit) travels by reference and arrives whole
    big = base64.b64encode(os.urandom(600 * 1024)).decode()
    model.queue([ms.text("noise")], model="threadline-vision")
    run_id, _ = await run_stream(settings, "vision-gpt", [{"type": "text", "text": "and this?"},
                                                          {"type": "file", "data": big, "mimeType": "image/jpeg"}])
    sent = model.requests(model="threadline-vision")[0]["body"]["messages"][-1]["content"]
    assert sent == [{"type": "text", "text": "and this?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{big}"}}]
    await run_row(cluster.dsn, run_id)  # the step's messages are stored with its result, after its finish chunk
    stored = await rows(cluster.dsn, "SELECT content FROM messages WHERE run_id = $1 AND role = 'user'", run_id)
    stored_file = dict(stored[0]["content"]["parts"][1])
    assert isinstance(stored_file.pop("createdAt"), int)  # Mastra stamps each stored part (epoch ms)
    assert stored_file == {"type": "file", "data": big, "mimeType": "image/jpeg"}


async def test_an_unreadable_image_is_a_clear_error_reply_and_the_thread_goes_on(services, settings, model):
    thread = f"th-{uuid.uuid4().hex[:8]}"
    async with ThreadlineClient(settings) as tl:
        sent = await tl.stream([{"type": "text", "text": "look"}, {"type": "image", "image": "not base64 at all!",
                                                                  "mediaType": "image/png"}],
                               agent_id="vision-gpt", resource_id="res-1", thread_id=thread)
        with pytest.raises(RequestFailed) as info:
            await sent.accepted
    assert info.value.code == "invalid_parts" and "not a URL, a data: URL or valid base64" in str(info.value)
    model.queue([ms.text("still here")], model="threadline-vision")
    _, chunks = await run_stream(settings, "vision-gpt", "hello", thread=thread)
    assert _texts(chunks) == "still here"


async def test_reasoning_is_streamed_stored_and_seen_by_processors_and_usage_has_its_details(
        services, settings, model, cluster):
    usage = {"prompt_tokens": 40, "completion_tokens": 12, "prompt_tokens_details": {"cached_tokens": 30}}
    model.queue([ms.tool_calls(ms.tool_call("weather", {"city": "Bergen"}), reasoning="Bergen is rainy, check.",
                               usage=usage),
                 ms.text("Rain in Bergen.", usage={"prompt_tokens": 60, "completion_tokens": 5})],
                model="claude-sonnet-4-5-threadline-thinker")
    run_id, chunks = await run_stream(settings, "thinker", "weather in Bergen?")
    types = [c["type"] for c in chunks]
    assert types[types.index("step-start") + 1] == "reasoning-start"
    assert "".join(c["payload"]["text"] for c in chunks if c["type"] == "reasoning-delta") == "Bergen is rainy, check."
    assert types.index("reasoning-end") < types.index("tool-call")
    run = await run_row(cluster.dsn, run_id)
    assert run["state"]["processor_state"]["reasoning-transformer"]["seen"][0] == [
        "reasoning", "tool-invocation"]  # the stored reasoning part, seen at step 1 (no step-start first, as Mastra)
    finish = chunks[-1]["payload"]["output"]["usage"]
    assert finish["inputTokens"] == 100 and finish["outputTokens"] == 17 and finish["cachedInputTokens"] == 30
    second = model.requests(model="claude-sonnet-4-5-threadline-thinker")[1]["body"]
    assert [b["type"] for b in second["messages"][1]["content"]] == ["tool_use"]  # reasoning is not sent back


async def test_the_runs_usage_counts_every_billed_attempt(services, settings, model):
    model.queue([{"chunks": ["meh"], "usage": {"prompt_tokens": 10, "completion_tokens": 2,
                                                "completion_tokens_details": {"reasoning_tokens": 1}}},
                 {"chunks": ["a much longer answer"], "usage": {"prompt_tokens": 12, "completion_tokens": 6}}],
                model="threadline-retrying")
    _, chunks = await run_stream(settings, "retrying", "x")
    assert sum(1 for c in chunks if c["type"] == "attempt-discarded") == 1
    usage = chunks[-1]["payload"]["output"]["usage"]
    assert (usage["inputTokens"], usage["outputTokens"], usage["totalTokens"], usage["reasoningTokens"]) == (22, 8, 30, 1)


WEATHER = {"type": "object", "properties": {"city": {"type": "string"}, "temp": {"type": "number"}},
           "required": ["city", "temp"]}


async def test_structured_output_is_requested_validated_streamed_and_returned(services, settings, model):
    model.queue([ms.text('{"city": "Oslo", "temp": 3}')], model="threadline-json")
    async with ThreadlineClient(settings) as tl:
        result = await tl.generate("weather?", agent_id="json-gpt", resource_id="res-1",
                                   thread_id=f"th-{uuid.uuid4().hex[:8]}", timeout_s=60,
                                   options={"structuredOutput": {"schema": WEATHER, "name": "weather"}})
    assert result.object == {"city": "Oslo", "temp": 3} and result.error is None
    body = model.requests(model="threadline-json")[0]["body"]
    assert body["response_format"] == {"type": "json_schema", "json_schema": {"name": "weather", "schema": WEATHER}}
    # the stream carries Mastra's object chunks (the object at the top level)
    model.queue([ms.text('{"city": "Rome", "temp": 21}')], model="threadline-json")
    _, chunks = await run_stream(settings, "json-gpt", "weather?", options={"structuredOutput": {"schema": WEATHER}})
    objects = [(c["type"], c["object"]) for c in chunks if c["type"] in ("object", "object-result")]
    assert objects == [("object", {"city": "Rome", "temp": 21}), ("object-result", {"city": "Rome", "temp": 21})]
    assert content(chunks)[-1] == ("finish", "stop")


async def test_structured_output_through_anthropic_is_a_forced_tool_and_a_pydantic_model_validates_it(
        services, settings, model):
    model.queue([ms.tool_calls(ms.tool_call("json_tool_call", {"city": "Paris", "days": ["sun", "rain"]}))],
                model="threadline-forecast")
    async with ThreadlineClient(settings) as tl:
        result = await tl.generate("forecast?", agent_id="forecaster", resource_id="res-1",
                                   thread_id=f"th-{uuid.uuid4().hex[:8]}", timeout_s=60)
    assert result.object == {"city": "Paris", "days": ["sun", "rain"]}
    body = model.requests(model="threadline-forecast")[0]["body"]
    assert body["tool_choice"] == {"name": "json_tool_call", "type": "tool"}
    assert body["tools"][0]["name"] == "json_tool_call"
    assert body["tools"][0]["input_schema"]["required"] == ["city", "days"]


async def test_an_invalid_answer_or_a_schema_that_is_not_json_schema_is_a_clear_error(services, settings, model):
    model.queue([ms.text('{"city": 3}')], model="threadline-json")
    _, chunks = await run_stream(settings, "json-gpt", "weather?", options={"structuredOutput": {"schema": WEATHER}})
    error = content(chunks)[-2][1]["error"]
    assert error["kind"] == "structured_output" and "does not match the schema" in error["message"]
    assert content(chunks)[-1] == ("finish", "error")
    before = len(model.requests(model="threadline-json"))
    thread = f"th-{uuid.uuid4().hex[:8]}"
    _, chunks = await run_stream(settings, "json-gpt", "weather?", thread=thread,
                                 options={"structuredOutput": {"schema": {"type": "no-such-type"}}})
    error = content(chunks)[-2][1]["error"]
    assert error["kind"] == "structured_output" and "not a valid JSON Schema" in error["message"]
    assert len(model.requests(model="threadline-json")) == before  # nothing was sent
    model.queue([ms.text("fine")], model="threadline-json")  # the worker and the thread go on
    _, chunks = await run_stream(settings, "json-gpt", "hello", thread=thread)
    assert _texts(chunks) == "fine"


async def test_a_cluster_wide_limit_spaces_the_calls_of_concurrent_runs(services, settings, model, cluster):
    model.queue([ms.text("ok", times=12)], model="threadline-limited")
    threads = [f"th-lim-{uuid.uuid4().hex[:6]}" for _ in range(12)]
    results = await asyncio.gather(*(run_stream(settings, "limited", "go", thread=t) for t in threads))
    assert all(content(chunks)[-1] == ("finish", "stop") for _, chunks in results)
    times = sorted(r["time"] for r in model.requests(model="threadline-limited"))
    assert len(times) == 12
    # 5/s over every worker: the 12th call is due 2.2 s after the first was taken (less the first
    # call's own way from the take to the provider, given a full second here)
    assert times[-1] - times[0] >= 11 / 5 - 1.0
    bucket = await rows(cluster.dsn, "SELECT key FROM model_rate_buckets WHERE key = 'openai/threadline-limited|rpm'")
    assert len(bucket) == 1
