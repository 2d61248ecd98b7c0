"""The model call alone: CPU that ``threadline.runtime.model.llm.stream_model`` spends per call and per
chunk, against the fake model server in its own process (no Kafka, no Postgres, no services).

    python -m bench.model_call                    # 200 short calls + one 20,000-chunk stream
    python -m bench.model_call --calls 50 --chunks 5000 --profile /tmp/model_call.prof

Figures (CPU of this process only, ``time.process_time``; the server runs elsewhere):

* **short call**: ``--calls`` sequential calls, each a 12-word text reply to a prompt of
  ``--history`` earlier messages (~60 words each), as a step of a thread with history makes;
  CPU ms per call (median of ``--repeat`` blocks) and wall ms to the first text delta (median).
* **long stream**: one call that streams ``--chunks`` one-word chunks with no delay; CPU µs per
  chunk and chunks/s (wall).

``--profile PATH`` writes a cProfile of one extra block of both to ``PATH`` (pstats format).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import statistics
import sys
import time
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from threadline.runtime.model import llm
from threadline.testing.harness import ModelServerProcess
from threadline.testing.model_script import ModelScript

MODEL = "threadline-bench-model-call"
WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog", "and", "then", "runs", "far",
         "away", "into", "the", "hills")


def _history(n: int) -> list[dict[str, Any]]:
    text = " ".join(WORDS * 4)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "Answer briefly."}]
    for i in range(n):
        msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"{i}: {text}"})
    msgs.append({"role": "user", "content": "And now?"})
    return msgs


async def _call(api_base: str, messages: list[dict[str, Any]]) -> tuple[int, float | None]:
    outcome, n, first = llm.ModelOutcome(), 0, None
    t0 = time.perf_counter()
    async for chunk in llm.stream_model(model=f"openai/{MODEL}", messages=messages, tools=None, tool_choice=None,
                                        model_settings=None, provider_options=None, api_base=api_base,
                                        timeout_s=60.0, outcome=outcome):
        if chunk["type"] == "text-delta":
            n += 1
            if first is None:
                first = time.perf_counter() - t0
    return n, first


async def short_calls(server: ModelServerProcess, calls: int, history: int) -> dict[str, float]:
    script, messages = ModelScript(server.url), _history(history)
    await script.aqueue({"text": " ".join(WORDS[:12]), "times": calls}, model=MODEL)
    firsts = []
    cpu0, t0 = time.process_time(), time.perf_counter()
    for _ in range(calls):
        _, first = await _call(server.api_base, messages)
        firsts.append(first or 0.0)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    return {"cpu_ms_per_call": cpu / calls * 1e3, "wall_ms_per_call": wall / calls * 1e3,
            "first_text_ms_p50": statistics.median(firsts) * 1e3}


async def long_stream(server: ModelServerProcess, chunks: int) -> dict[str, float]:
    script = ModelScript(server.url)
    await script.aqueue({"chunks": [f"w{i} " for i in range(chunks)]}, model=MODEL)
    cpu0, t0 = time.process_time(), time.perf_counter()
    n, _ = await _call(server.api_base, [{"role": "user", "content": "Stream, please."}])
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    assert n == chunks, (n, chunks)
    return {"cpu_us_per_chunk": cpu / n * 1e6, "chunks_per_s": n / wall}


async def measure(args: argparse.Namespace, server: ModelServerProcess) -> dict[str, Any]:
    await short_calls(server, 20, args.history)  # warm-up: imports, connection pool
    await long_stream(server, 1000)
    shorts = [await short_calls(server, args.calls, args.history) for _ in range(args.repeat)]
    longs = [await long_stream(server, args.chunks) for _ in range(args.repeat)]
    out = {"short": {k: round(statistics.median(s[k] for s in shorts), 3) for k in shorts[0]},
           "long": {k: round(statistics.median(s[k] for s in longs), 2) for k in longs[0]},
           "conditions": {"calls": args.calls, "history_messages": args.history, "chunks": args.chunks,
                          "repeat": args.repeat}}
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        await short_calls(server, args.calls, args.history)
        await long_stream(server, args.chunks)
        prof.disable()
        prof.dump_stats(args.profile)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.model_call", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=200, help="short calls per block (default 200)")
    p.add_argument("--history", type=int, default=20, help="earlier messages in the prompt (default 20)")
    p.add_argument("--chunks", type=int, default=20_000, help="chunks of the long stream (default 20000)")
    p.add_argument("--repeat", type=int, default=3, help="blocks of each; medians are reported (default 3)")
    p.add_argument("--profile", help="write a cProfile of one more block to this file")
    args = p.parse_args(argv)
    server = ModelServerProcess()
    server.start()
    try:
        out = asyncio.run(measure(args, server))
    finally:
        server.stop()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
