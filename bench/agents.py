"""Agents of the benchmarks (the services load them as ``THREADLINE_AGENTS_MODULE=bench.agents``).

Each figure has its own agent and model name, so the fake model's script queue of one figure
never answers another's requests.
"""

from __future__ import annotations

from typing import Any

from threadline.runtime import Agent, Processor, create_tool


class PassThrough(Processor):
    """A ``process_output_stream`` processor that returns every part unchanged."""

    def __init__(self, i: int) -> None:
        self.id = f"pass-{i}"

    async def process_output_stream(self, *, part, **_):
        return part


async def _noop(input: Any, context: Any) -> dict[str, Any]:
    return {"ok": True}


noop = create_tool(id="noop", description="Does nothing and returns ok.", execute=_noop)
"""The tool-step figure's tool: the same no-op tool the peer comparison gives every system (docs/benchmarks.md)."""


ttfc = Agent(id="bench-ttfc", instructions="Answer briefly.", model="openai/threadline-bench-ttfc")
throughput = Agent(id="bench-throughput", instructions="Answer briefly.", model="openai/threadline-bench-throughput",
                   output_processors=[PassThrough(i) for i in range(3)])
concurrency = Agent(id="bench-concurrency", instructions="Answer briefly.",
                    model="openai/threadline-bench-concurrency")
signals = Agent(id="bench-signals", instructions="Answer briefly.", model="openai/threadline-bench-signals")
toolsteps = Agent(id="bench-toolsteps", instructions="Answer briefly.", model="openai/threadline-bench-toolsteps",
                  tools=[noop], default_options={"maxSteps": 5})
limits = Agent(id="bench-limits", model="openai/threadline-bench-limits")
