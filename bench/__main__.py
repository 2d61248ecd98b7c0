"""``make bench`` / ``python -m bench``: the figures of docs/benchmarks.md (six, plus the burst), each beside a baseline
measured in the same run; prints a table and writes ``bench/results/<date>.json`` (a partial run,
``--only``, writes ``<date>-<figures>.json``; ``--quick`` adds ``-quick``) plus py-spy profiles of the TTFC and throughput
runs (``<date>-*.collapsed.txt.gz``, collapsed stacks that speedscope opens once unpacked).

    python -m bench                              # everything (about 9 minutes)
    python -m bench --only ttfc --runs 100       # one figure, smaller
    python -m bench --only concurrency --sizes 50,100 --quick

Figures: ttfc, sse (first token over the gateway's SSE beside the Kafka-native client's), throughput,
concurrency (also gives scaling), burst (500 runs at once on one worker, failed
runs and re-executed steps counted), burst2 (the same with 1,000 runs on two workers), scaling, signals,
toolsteps (the overhead of a tool step, as the peer comparison measures it), pipeline, limits; and, only when named in --only,
topics (10,000 thread topics on the broker: creation rate, broker memory, start-up; ``--topics N``).
Cluster figures start their own services on the local cluster (``make infra-up`` if needed).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from bench import pipeline
from bench.report import table, top_costs_text

RESULTS = Path(__file__).parent / "results"
FIGURES = ("ttfc", "sse", "throughput", "concurrency", "burst", "burst2", "scaling", "signals", "toolsteps",
           "pipeline", "limits")
EXTRA = ("topics",)
"""Figures only run when named in ``--only`` (``topics`` creates 10,000 topics on the broker)."""


def machine() -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                  if line.startswith("MemTotal"))
    return {"nproc": os.cpu_count(), "cpu": cpu, "memory_gb": round(mem_kb / 1024 / 1024, 1),
            "python": sys.version.split()[0], "platform": platform.platform(),
            "load_avg_at_start": [round(x, 2) for x in os.getloadavg()]}


async def cluster_figures(args: argparse.Namespace, only: set[str], stamp: str) -> dict[str, Any]:
    from bench import concurrency, signals, throughput, toolsteps, ttfc
    from bench.env import BenchEnv

    env = BenchEnv(partitions=args.partitions)
    out: dict[str, Any] = {}
    t0 = time.monotonic()
    print(f"starting services (topic prefix {env.prefix}, logs {env.log_dir})", flush=True)
    try:
        await env.start()
        logging.disable(logging.ERROR)  # aiokafka on brand-new topics: "leader not yet known"
        profile_dir = None if args.no_profile else RESULTS

        async def figure(name: str, label: str, make: Any) -> None:
            print(f"[{time.monotonic() - t0:5.0f}s] {label}", flush=True)
            gc.collect()
            gc.disable()  # the instrument's own collector pauses (up to 1.4 s in a burst) are not measured
            try:
                out[name] = await make()
            except Exception as exc:  # noqa: BLE001 - one failing figure must not lose the others
                traceback.print_exc()
                out.setdefault("errors", {})[name] = f"{type(exc).__name__}: {exc}"
            finally:
                gc.enable()

        if "ttfc" in only:
            await figure("ttfc", f"time to first chunk: {args.runs} runs", lambda: ttfc.run(
                env, runs=args.runs, profile_runs=0 if args.no_profile else args.profile_runs,
                profile_dir=profile_dir, stamp=stamp, new_threads=args.new_threads))
        if "sse" in only:
            from bench import sse

            await figure("sse", f"time to first token over SSE and over Kafka: {args.sse_runs} runs each",
                         lambda: sse.run(env, runs=args.sse_runs))
        if "throughput" in only:
            await figure("throughput", f"throughput: {args.tokens} tokens", lambda: throughput.run(
                env, tokens=args.tokens, profile_dir=profile_dir, stamp=stamp, profile=not args.no_profile))
        if "signals" in only:
            await figure("signals", f"signal latency: {args.samples} samples",
                         lambda: signals.run(env, samples=args.samples))
        if "toolsteps" in only:
            await figure("toolsteps", f"tool-step overhead: {args.tool_runs} runs of three steps",
                         lambda: toolsteps.run(env, runs=args.tool_runs, threads=args.tool_threads))
        if "burst" in only:
            await figure("burst", f"burst: {args.burst_runs} runs at once on one worker",
                         lambda: concurrency.burst(env, runs=args.burst_runs, profile_dir=profile_dir, stamp=stamp))
        if "burst2" in only:
            await figure("burst2", f"burst: {args.burst2_runs} runs at once on two workers",
                         lambda: concurrency.burst(env, runs=args.burst2_runs, workers=2))
        if "topics" in only:
            from bench import topics

            await figure("topics", f"topics: {args.topics} thread topics on the broker",
                         lambda: topics.run(env, topics=args.topics))
        if only & {"concurrency", "scaling"}:
            sizes = tuple(args.sizes) if "concurrency" in only else ()
            await figure("_conc", f"concurrency {sizes}, scaling at {args.scaling_size}",
                         lambda: concurrency.run(env, sizes=sizes, scaling_size=args.scaling_size))
            got = out.pop("_conc", None)
            if got:
                if "concurrency" in only:
                    out["concurrency"] = got["concurrency"]
                out["scaling"] = got["scaling"]
    finally:
        print(f"[{time.monotonic() - t0:5.0f}s] stopping services", flush=True)
        await env.stop()
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default=",".join(FIGURES), help="comma-separated figures (default: all)")
    p.add_argument("--runs", type=int, default=500, help="TTFC runs (default 500)")
    p.add_argument("--new-threads", type=int, default=100,
                   help="brand-new threads of the TTFC figure (subscribe + send → first text; default 100)")
    p.add_argument("--sse-runs", type=int, default=200, help="runs per path of the SSE figure (default 200)")
    p.add_argument("--profile-runs", type=int, default=150, help="extra TTFC runs under py-spy")
    p.add_argument("--tokens", type=int, default=20_000, help="throughput tokens (default 20000)")
    p.add_argument("--sizes", default="100,300,500", help="concurrency sizes (default 100,300,500)")
    p.add_argument("--burst-runs", type=int, default=500, help="runs of the burst figure (default 500)")
    p.add_argument("--burst2-runs", type=int, default=1000,
                   help="runs of the two-worker burst figure (default 1000)")
    p.add_argument("--scaling-size", type=int, default=300, help="runs of the 1-vs-2-worker figure")
    p.add_argument("--samples", type=int, default=150, help="signal-latency samples (default 150)")
    p.add_argument("--tool-runs", type=int, default=100, help="runs of the tool-step figure (default 100)")
    p.add_argument("--tool-threads", type=int, default=10,
                   help="threads the tool-step runs go round (default 10; fewer: longer histories)")
    p.add_argument("--partitions", type=int, default=6, help="partitions of the internal topics")
    p.add_argument("--limit-runs", type=int, default=200, help="runs of the provider-limits figure (default 200)")
    p.add_argument("--limit-rps", type=float, default=20, help="requests/s the limits figure's provider takes")
    p.add_argument("--topics", type=int, default=10_000, help="thread topics of the topics figure (default 10000)")
    p.add_argument("--quick", action="store_true", help="small sizes everywhere (a smoke run, ~2 minutes)")
    p.add_argument("--no-profile", action="store_true", help="skip the py-spy recordings")
    args = p.parse_args(argv)
    args.sizes = [int(x) for x in args.sizes.split(",") if x]
    if args.quick:
        args.runs, args.profile_runs, args.tokens, args.samples = min(args.runs, 60), 30, 3000, 20
        args.sse_runs, args.tool_runs = min(args.sse_runs, 40), min(args.tool_runs, 20)
        args.sizes, args.scaling_size, args.burst_runs = [20, 50], 50, min(args.burst_runs, 50)
        args.burst2_runs = min(args.burst2_runs, 100)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    unknown = only - set(FIGURES) - set(EXTRA)
    if unknown:
        print(f"unknown figures: {', '.join(sorted(unknown))} (have: {', '.join(FIGURES + EXTRA)})", file=sys.stderr)
        return 2
    stamp = time.strftime("%Y-%m-%d")
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": machine(),
                               "command": "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:])}
    started = time.monotonic()
    if only - {"pipeline", "limits"}:
        results.update(asyncio.run(cluster_figures(args, only, stamp)))
    if "limits" in only:  # its own services per condition (the limits are worker settings)
        from bench import limits

        try:
            results["limits"] = asyncio.run(limits.run(runs=args.limit_runs, rps=args.limit_rps,
                                                       partitions=args.partitions))
        except Exception as exc:  # noqa: BLE001 - the other figures are written all the same
            traceback.print_exc()
            results.setdefault("errors", {})["limits"] = f"{type(exc).__name__}: {exc}"
    if "pipeline" in only:
        results["pipeline"] = pipeline.run()
    results["duration_s"] = round(time.monotonic() - started, 1)
    RESULTS.mkdir(exist_ok=True)
    name = stamp if only == set(FIGURES) else f"{stamp}-{'-'.join(sorted(only))}"
    if args.quick:  # a smoke run never replaces a full run's figures
        name += "-quick"
    out = RESULTS / f"{name}.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print()
    print(table(results))
    costs = top_costs_text(results)
    if costs:
        print("\nprofiles (self time):\n" + costs)
    print(f"\nwritten {out} in {results['duration_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
