"""Figure 1c: tool-step overhead, measured as the peer comparison measures its "step overhead"
(docs/benchmarks.md, "The peer comparison": (third ``step-finish`` − first) / 2), on the bench's own
services. The agent ``bench-toolsteps`` has one no-op tool and ``maxSteps`` 5; before every run the
fake model gets a fresh script of three replies: a ``noop`` tool call, another, then the text
"Done: the tool ran twice." (no delay: an instant model). A message to an idle thread → its
``finish`` at the subscriber of the thread's chunk topic.

Per run, ``ms_per_step`` = (the third ``step-finish`` − the first) / 2, both arrival times at the
subscriber: what one more step costs end to end (the step stored and handed on, the next step's
model call, in the second step the tool's run, which ends before its ``step-finish``, and the
chunks' delivery), the model's own time ~0. A run without exactly three ``step-finish`` chunks and
two ``tool-result`` chunks is counted as ``bad`` and left out. ``run_ms``: send → ``finish`` (the
peer table's "whole 3-step run" is send → the third ``step-finish``, ``to_last_step_finish_ms`` here).

Runs go one at a time, round-robin over ``threads`` threads, each warmed up once first with a
one-step text reply (as the peer driver does): a thread's first tool step is among the measured runs.

``worker_step_gap_ms``: the two step boundaries of each measured run as the worker saw them,
split (the worker's ``step gap`` lines, :func:`bench.stats.worker_step_gap`, as in figure 4).
``cpu_ms_per_step``: each process's CPU (``/proc``, user + system) over the measured runs, per
step (three per run): the worker, the other services, the native broker and PostgreSQL (every
``postgres`` process still alive at the end; pooled connections live through the figure).

``threads`` sets how much history each thread gathers: 100 runs over 10 threads leave ~10 runs
of history in each prompt by the end, 300 over 3 about 100 (``--tool-threads``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.concurrency import service_pids
from bench.env import BenchEnv
from bench.procstat import cpu_seconds, cpu_seconds_of
from bench.stats import ratio, summary_ms, worker_step_gap
from bench.subscriber import is_type
from threadline.testing.model_script import Script

AGENT = "bench-toolsteps"
MODEL = "threadline-bench-toolsteps"
SCRIPT: list[Script] = [{"tool_calls": [{"name": "noop", "arguments": {}}]},
                        {"tool_calls": [{"name": "noop", "arguments": {}}]},
                        {"text": "Done: the tool ran twice."}]
"""The fake model's three replies of one measured run (drv_tl's ``steps``)."""


async def _one(env: BenchEnv, thread: str, topic: str, script: list[Script]) -> dict[str, Any]:
    assert env.client is not None and env.subscriber is not None and env.script is not None
    sub = env.subscriber
    await env.script.aqueue(script, model=MODEL)
    start = len(sub.by_topic[topic])
    t0 = time.perf_counter()
    sent = await env.client.send_message("Call the tool twice, then answer.", agent_id=AGENT,
                                         resource_id="bench-user", thread_id=thread)
    accepted = await sent.accepted
    _, fin = await sub.wait(topic, is_type("finish"), start=start, timeout_s=120)
    got = sub.by_topic[topic][start:]
    return {"action": accepted.action, "run": fin.t - t0,
            "fins": [r.t - t0 for r in got if r.chunk.get("type") == "step-finish"],
            "tool_results": sum(1 for r in got if r.chunk.get("type") == "tool-result")}


async def run(env: BenchEnv, *, runs: int = 100, threads: int = 10) -> dict[str, Any]:
    names = [f"tools-{i}" for i in range(threads)]
    topics = await env.chunk_topics([("bench-user", t) for t in names])
    for n in range(threads):  # warm-up: every thread once, a one-step text reply
        await _one(env, names[n], topics[n], [{"text": "ok"}])
    log_path = env.log_dir / f"{env.workers[0]}.log"
    log_from = log_path.stat().st_size if log_path.exists() else 0
    per_step, whole, to_last, bad = [], [], [], 0
    actions: dict[str, int] = {}
    pids = {"processor_worker": env.worker_pids()[0], **service_pids(env)}
    cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
    pg0 = cpu_seconds_of("postgres")
    for k in range(runs):
        r = await _one(env, names[k % threads], topics[k % threads], SCRIPT)
        actions[r["action"]] = actions.get(r["action"], 0) + 1
        if len(r["fins"]) != 3 or r["tool_results"] != 2:
            bad += 1
            continue
        per_step.append((r["fins"][-1] - r["fins"][0]) / 2)
        whole.append(r["run"])
        to_last.append(r["fins"][-1])
    cpu = {name: round(1000 * (cpu_seconds(pid) - cpu0[name]) / (3 * runs), 2) for name, pid in pids.items()}
    cpu["postgres"] = round(1000 * (cpu_seconds_of("postgres") - pg0) / (3 * runs), 2)
    steps = summary_ms(per_step)
    for _ in range(20):  # a run's last `step gap` line is written after its finish reached the subscriber
        gap = worker_step_gap(log_path, log_from)
        if gap.get("total_ms", {}).get("n", 0) >= 2 * len(per_step):
            break
        await asyncio.sleep(0.1)
    return {
        "conditions": {"runs": runs, "concurrency": 1, "threads": threads, "warmup_runs_per_thread": 1,
                       "agent": "one no-op tool, maxSteps 5, no processors",
                       "script": "tool call noop {}, tool call noop {}, text; no delay",
                       "instances": "1 per service"},
        "ms_per_step": steps, "run_ms": summary_ms(whole), "to_last_step_finish_ms": summary_ms(to_last),
        "bad_runs": bad, "accepted_actions": actions,
        "worker_step_gap_ms": gap, "cpu_ms_per_step": cpu,
        "ratio_to_target": {"p50": ratio(steps.get("p50", float("nan")), 5),
                            "p99": ratio(steps.get("p99", float("nan")), 15)},
        "target": {"p50_ms": 5, "p99_ms": 15, "source": "Restate's step overhead in the peer comparison"},
    }
