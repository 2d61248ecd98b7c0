"""Agents of the provider tests: model-level retries, fallback models, error processors that
edit the request before a retry."""

from __future__ import annotations

from pydantic import BaseModel

from threadline.runtime import Agent, Processor, create_tool

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


class TrimOnOverflow(Processor):
    """An ``ErrorRecoveryProcessor``: on a context overflow, drop every message but the
    last one and ask for a retry (once)."""

    id = "trim"

    def process_api_error(self, *, error, message_list, retry_count, state, **_):
        state.setdefault("kinds", []).append(error.kind)
        if retry_count > 0 or error.kind != "context_length_exceeded":
            return None
        messages = message_list.get.all.db()
        message_list.remove_by_ids([m["id"] for m in messages[:-1]])
        return {"retry": True, "metadata": {"dropped": len(messages) - 1}}


class ThinkHarder(Processor):
    """Step-level provider options: asked for through the request context, they replace the call's."""

    id = "think-harder"

    def process_input_step(self, *, request_context, **_):
        if request_context.get("think_hard"):
            return {"providerOptions": {"anthropic": {"thinking": {"type": "enabled", "budgetTokens": 8192}}}}
        return None


class ReasoningTransformer(Processor):
    """A ``ReasoningTransformer``: reasoning parts of earlier assistant messages become
    ``thinking`` parts at each step; records the part types it found."""

    id = "reasoning-transformer"

    def process_input_step(self, *, messages, message_list, state, **_):
        for msg in messages:
            if msg["role"] == "assistant" and msg["content"].get("parts"):
                state.setdefault("seen", []).append([p["type"] for p in msg["content"]["parts"]])
                for part in msg["content"]["parts"]:
                    if part["type"] == "reasoning":
                        part["type"] = "thinking"
        return message_list


class Forecast(BaseModel):
    city: str
    days: list[str]


class AskForForecast(Processor):
    """Step-level structured output: a pydantic model, set by a processor."""

    id = "forecast-schema"

    def process_input_step(self, **_):
        return {"structuredOutput": {"schema": Forecast}}


model_retry = Agent(id="model-retry", model="openai/threadline-model-retry")
fallback = Agent(id="fallback", model=[{"model": "openai/threadline-fb-primary", "max_retries": 1},
                                       {"model": "openai/threadline-fb-backup", "max_retries": 0}])
trim_retry = Agent(id="trim-retry", model="openai/threadline-trim-retry", error_processors=[TrimOnOverflow()],
                   max_retries=0, max_processor_retries=2)

google_without_key = Agent(id="google-no-key", model="google/gemini-2.5-pro")  # the services set no Google key

anthropic = Agent(id="anthropic-fake", model="anthropic/threadline-anthropic", instructions="Answer briefly.",
                  tools=[create_tool(id="weather", description="the weather in a city", input_schema=CITY,
                                     execute=lambda args: {"city": args["city"], "sky": "clear"})])

# a Claude-like name: litellm sends thinking only to models it knows can reason
cached_claude = Agent(id="cached-claude", model="anthropic/claude-sonnet-4-5-threadline-cache",
                      instructions=[{"role": "system", "content": "The long, stable policy text.",
                                     "providerOptions": {"anthropic": {"cacheControl": {"type": "ephemeral"}}}},
                                    "Answer briefly."],
                      input_processors=[ThinkHarder()])
reasoning_gpt = Agent(id="reasoning-gpt", model="openai/threadline-reasoning")
vision_gpt = Agent(id="vision-gpt", model="openai/threadline-vision")
thinker = Agent(id="thinker", model="anthropic/claude-sonnet-4-5-threadline-thinker", input_processors=[ReasoningTransformer()],
                tools=[create_tool(id="weather", description="the weather in a city", input_schema=CITY,
                                   execute=lambda args: {"city": args["city"], "sky": "rain"})])

agents = [model_retry, fallback, trim_retry, google_without_key, anthropic, cached_claude, reasoning_gpt,
          vision_gpt, thinker]
json_gpt = Agent(id="json-gpt", model="openai/threadline-json")
forecaster = Agent(id="forecaster", model="anthropic/threadline-forecast", input_processors=[AskForForecast()])
limited = Agent(id="limited", model="openai/threadline-limited")  # THREADLINE_MODEL_LIMITS in tests/e2e/conftest.py
agents += [json_gpt, forecaster, limited]
