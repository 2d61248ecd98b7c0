"""Agents of the benchmarks (the services load them as ``THREADLINE_AGENTS_MODULE=bench.agents``).

Each figure has its own agent and model name, so the fake model's script queue of one figure
never answers another's requests.
"""

from __future__ import annotations

from threadline.runtime import Agent, Processor


class PassThrough(Processor):
    """A ``process_output_stream`` processor that returns every part unchanged."""

    def __init__(self, i: int) -> None:
        self.id = f"pass-{i}"

    async def process_output_stream(self, *, part, **_):
        return part


ttfc = Agent(id="bench-ttfc", instructions="Answer briefly.", model="openai/threadline-bench-ttfc")
throughput = Agent(id="bench-throughput", instructions="Answer briefly.", model="openai/threadline-bench-throughput",
                   output_processors=[PassThrough(i) for i in range(3)])
concurrency = Agent(id="bench-concurrency", instructions="Answer briefly.",
                    model="openai/threadline-bench-concurrency")
signals = Agent(id="bench-signals", instructions="Answer briefly.", model="openai/threadline-bench-signals")
limits = Agent(id="bench-limits", model="openai/threadline-bench-limits")
