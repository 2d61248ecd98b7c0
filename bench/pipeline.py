"""Figure 6 of docs/benchmarks.md: per-chunk cost of the ``process_output_stream`` pipeline, in process.

Measures 0, 1, 3 and 10 pass-through processors over the same ``text-delta`` chunks and reports
microseconds per chunk, the cost per extra processor, and the ratio to the 0-processor baseline
measured in the same run. Best of ``repeats`` runs (noisy machines).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from threadline._internal.attrdict import wrap
from threadline.runtime import Processor, ProcessorRunner


class PassThrough(Processor):
    def __init__(self, i: int) -> None:
        self.id = f"pass-{i}"

    async def process_output_stream(self, *, part, **_):
        return part


async def _per_chunk_us(n_processors: int, chunks: int) -> float:
    runner = ProcessorRunner(input_processors=[], output_processors=[PassThrough(i) for i in range(n_processors)],
                             error_processors=[], states={})
    parts = [wrap({"type": "text-delta", "payload": {"id": "t0", "text": f"tok{i} "}}) for i in range(chunks)]
    start = time.perf_counter()
    for part in parts:
        await runner.process_output_stream(part)
    return (time.perf_counter() - start) / chunks * 1e6


def run(chunks: int = 20000, repeats: int = 5) -> dict[str, Any]:
    """Return ``{processors: us_per_chunk}`` plus the derived figures."""
    results: dict[int, float] = {}
    for n in (0, 1, 3, 10):
        results[n] = min(asyncio.run(_per_chunk_us(n, chunks)) for _ in range(repeats))
    base = results[0]
    return {
        "conditions": {"chunks": chunks, "repeats": repeats, "processors": "pass-through process_output_stream"},
        "us_per_chunk": {str(k): round(v, 2) for k, v in results.items()},
        "ratio_to_baseline": {str(k): round(v / base, 2) for k, v in results.items()},
        "us_per_extra_processor": round((results[10] - results[1]) / 9, 2),
        "target": {"3_processors_us": 20, "per_extra_processor_us": 3},
    }
