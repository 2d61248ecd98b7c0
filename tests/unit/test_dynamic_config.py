"""Dynamic configuration (docs/agents.md): plain and async functions of the request context,
resolved into one run's configuration; the request context schema."""

from __future__ import annotations

import pytest

from threadline.errors import ConfigurationError
from threadline.runtime import Agent, Memory, Processor, tool
from threadline.runtime.dynamic import ConfigCache, resolve_config, system_messages


@tool(description="t")
def lookup() -> dict:
    return {}


class Loud(Processor):
    id = "loud"

    async def process_output_stream(self, *, part, **_):
        return part


async def _tools(ctx):
    return {"find": lookup} if ctx.get("pro") else []


def _agent(**kw) -> Agent:
    return Agent(id="d", model=lambda ctx: f"openai/{ctx['m']}", tools=_tools,
                 default_options=lambda ctx: {"maxSteps": ctx["steps"]},
                 memory=_memory, metadata=lambda ctx: {"m": ctx["m"]},
                 output_processors=_outputs, **kw)


async def _memory(ctx):
    return {"lastMessages": ctx["steps"]}


async def _outputs(ctx):
    return [Loud()] if ctx.get("pro") else []


async def test_functions_plain_and_async_are_resolved() -> None:
    agent = _agent()
    assert agent.tools == {} and agent.default_options == {} and set(agent.dynamic) == {
        "tools", "default_options", "memory", "metadata"}
    cfg = await resolve_config(agent, {"m": "x", "steps": 2, "pro": True}, "openai/default")
    assert [m.model for m in cfg.models] == ["openai/x"]
    assert list(cfg.tools) == ["find"] and cfg.default_options == {"max_steps": 2}
    assert cfg.memory == Memory(last_messages=2) and cfg.metadata == {"m": "x"}
    assert [p.id for p in cfg.processors["output"]] == ["loud"] and cfg.processors["input"] == []
    plain = await resolve_config(agent, {"m": "y", "steps": 1}, "openai/default")
    assert plain.tools == {} and plain.processors["output"] == []


async def test_a_fallback_list_with_async_entries() -> None:
    async def second(ctx):
        return "openai/b"

    agent = Agent(id="f", model=["openai/a", {"model": second, "max_retries": 1}])
    cfg = await resolve_config(agent, {}, "openai/default")
    assert [(m.model, m.max_retries) for m in cfg.models] == [("openai/a", None), ("openai/b", 1)]


async def test_async_instructions() -> None:
    async def instructions(ctx):
        return [f"tier {ctx['tier']}", {"role": "system", "content": "be brief"}]

    agent = Agent(id="i", instructions=instructions)
    assert await system_messages(agent, {"tier": "pro"}) == [
        {"role": "system", "content": "tier pro"}, {"role": "system", "content": "be brief"}]


async def test_a_bad_value_from_a_function_is_a_configuration_error() -> None:
    agent = Agent(id="b", tools=lambda ctx: ["not a tool"])
    with pytest.raises(ConfigurationError, match="Tool instances"):
        await resolve_config(agent, {}, "m")
    with pytest.raises(ConfigurationError, match="default_options"):
        await resolve_config(Agent(id="o", default_options=lambda ctx: 3), {}, "m")


async def test_the_cache_resolves_once_per_run() -> None:
    calls = []

    def tools(ctx):
        calls.append(ctx)
        return []

    agent, cache = Agent(id="c", tools=tools), ConfigCache(size=2)
    for _ in range(3):
        await cache.get("run-1", agent, {}, "m")
    assert len(calls) == 1
    cache.drop("run-1")
    await cache.get("run-1", agent, {}, "m")
    await cache.get("run-2", agent, {}, "m")
    await cache.get("run-3", agent, {}, "m")  # run-1 falls out (size 2)
    await cache.get("run-1", agent, {}, "m")
    assert len(calls) == 5


def test_request_context_schema() -> None:
    agent = Agent(id="s", request_context_schema={"type": "object", "required": ["tier"],
                                                  "properties": {"tier": {"enum": ["free", "pro"]},
                                                                 "ids": {"type": "array", "items": {"type": "integer"}}}})
    agent.check_request_context({"tier": "pro", "ids": [1]})
    with pytest.raises(ConfigurationError, match="'tier' is a required property"):
        agent.check_request_context(None)
    with pytest.raises(ConfigurationError, match=r"request_context\.ids\[1\]: 'x' is not of type 'integer'"):
        agent.check_request_context({"tier": "free", "ids": [1, "x"]})
    Agent(id="n").check_request_context({"anything": 1})  # no schema: anything goes
    with pytest.raises(ConfigurationError, match="not a valid JSON Schema"):
        Agent(id="bad", request_context_schema={"type": "no-such-type"})
