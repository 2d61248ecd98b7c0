"""The save-and-claim statement alone, old and new side by side (decision 49; bench/results/HISTORY.md,
"Step overhead budget"): one run in a scratch database stored step after step, each call storing
step k and claiming k + 1 as a continuing worker does, timed at the client (send → answer,
commit included), beside two floors measured in the same block on the same connection kind:
``SELECT 1`` (a round trip) and a one-row ``UPDATE`` committed (a round trip plus a durable
commit). ``--sync-off`` adds a diagnostic pass of each function with ``synchronous_commit = off``
(never a setting of the project: it shows what the commit's WAL flush costs).

    python -m bench.save_claim_probe --calls 300 --blocks 3 [--sync-off]

Prints one JSON line per measurement (p50/p90/p99/mean in ms) and the load average per block.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import orjson

from bench.env import ROOT
from threadline.store.migrate import migrate
from threadline.store.steps import _SAVE_ARGS
from threadline.testing.harness import create_database, drop_database, ensure_native_cluster

FUNCTIONS = {"old": "threadline_save_step_continue", "lean": "threadline_save_step_claim"}


def _summary(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    at = lambda q: round(ms[min(len(ms) - 1, int(q * len(ms)))], 3)  # noqa: E731 - a local percentile
    return {"p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "mean": round(statistics.mean(ms), 3)}


async def _connect(dsn: str, sync: str = "on") -> asyncpg.Connection:
    conn = await asyncpg.connect(dsn)
    for typ in ("jsonb", "json"):
        await conn.set_type_codec(typ, encoder=lambda v: orjson.dumps(v).decode(), decoder=orjson.loads,
                                  schema="pg_catalog")
    await conn.execute(f"SET synchronous_commit = {sync}")
    return conn


async def save_claim(dsn: str, fn: str, calls: int, sync: str = "on") -> list[float]:
    """``calls`` continued steps of one fresh run through ``fn``; milliseconds per call."""
    conn = await _connect(dsn, sync)
    tid, run = f"t-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}"
    await conn.execute("INSERT INTO threads (thread_id, resource_id) VALUES ($1, 'res')", tid)
    await conn.execute("INSERT INTO thread_leases (thread_id, resource_id, run_id, epoch, expires_at) "
                       "VALUES ($1, 'res', $2, 1, now() + interval '1 hour')", tid, run)
    await conn.execute("INSERT INTO runs (run_id, thread_id, resource_id, agent_id, epoch, step_started, "
                       "step_owner, step_heartbeat) VALUES ($1, $2, 'res', 'a', 1, true, 'w', now())", run, tid)
    msgs: list[dict[str, Any]] = [{"id": f"{run}-0", "role": "user", "type": None,
                                   "content": {"format": 2, "parts": [{"type": "text", "text": "hello " * 20}]}}]
    step, attempt, out = 0, 1, []
    for i in range(calls):  # a tool loop: the step's messages grow, the last six are stored
        msgs = [*msgs, {"id": f"{run}-{i + 1}", "role": "assistant", "type": None,
                        "content": {"format": 2, "parts": [{"type": "text", "text": "word " * 40}]}}][-6:]
        started = time.perf_counter()
        row = await conn.fetchrow(f"SELECT * FROM {fn}{_SAVE_ARGS}", run, 1, step, attempt, 30.0, msgs, None,
                                  {"message_list": msgs}, (step + 1) * 1_000_000, "step-results", f"res:{tid}",
                                  [["h", "v"]], b"x" * 400, "w", 1_000_000)
        out.append((time.perf_counter() - started) * 1000)
        assert row is not None and row["outcome"] == "claimed", row
        step, attempt = row["step"], row["attempt"]
    await conn.close()
    return out


async def floors(dsn: str, calls: int) -> dict[str, list[float]]:
    """``SELECT 1`` and a one-row committed ``UPDATE``, ``calls`` each; milliseconds per call."""
    conn = await _connect(dsn)
    await conn.execute("CREATE TABLE IF NOT EXISTS probe_floor (id int PRIMARY KEY, n int)")
    await conn.execute("INSERT INTO probe_floor VALUES (1, 0) ON CONFLICT DO NOTHING")
    out: dict[str, list[float]] = {}
    for name, sql in (("select_1", "SELECT 1"), ("update_commit", "UPDATE probe_floor SET n = n + 1 WHERE id = 1")):
        out[name] = []
        for _ in range(calls):
            started = time.perf_counter()
            await conn.execute(sql)
            out[name].append((time.perf_counter() - started) * 1000)
    await conn.close()
    return out


async def main(calls: int, blocks: int, sync_off: bool) -> None:
    cluster = await asyncio.to_thread(ensure_native_cluster, ROOT)
    name = f"tl_probe_{uuid.uuid4().hex[:8]}"
    dsn = await create_database(cluster.admin_dsn, name)
    try:
        await asyncio.to_thread(migrate, dsn)
        for block in range(1, blocks + 1):
            load = Path("/proc/loadavg").read_text().split()[:3]
            print(json.dumps({"block": block, "load": load}))
            for label, fn in FUNCTIONS.items():
                for sync in ("on", "off") if sync_off else ("on",):
                    ms = await save_claim(dsn, fn, calls, sync)
                    print(json.dumps({"block": block, "what": label, "synchronous_commit": sync, **_summary(ms)}))
            for label, ms in (await floors(dsn, calls)).items():
                print(json.dumps({"block": block, "what": label, **_summary(ms)}))
    finally:
        await drop_database(cluster.admin_dsn, name)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--sync-off", action="store_true")
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.blocks, args.sync_off))
