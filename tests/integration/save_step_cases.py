"""The cases the step's save statement is checked on (tests/integration/test_save_step.py): a run
set up as a worker meets it, one save of its step 1, and everything the save touched read back.

``save_step_cases.json`` beside the tests holds what the statements this one replaced wrote in
each case (migrations 0011, 0017 and 0026 as they were before migration 0027): the store only
(0011's ``threadline_save_step``), the store and claim (0017's ``threadline_save_step_claim``),
the store, claim and announce (0026's ``threadline_save_step_announce``)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import orjson

from tests.integration.pg import leased_run

RECORDED = Path(__file__).with_name("data") / "save_step_cases.json"

_LIFE_START = [b'{"e": "thread_active"}', b'{"e": "run_started"}']
_LIFE_STEP = [b'{"e": "step_finished"}']

CASES: dict[str, dict[str, Any]] = {
    # store only: a continue the worker does not claim, and a run's end
    "store/continue": {"plan": "store"},
    "store/final": {"plan": "store", "final": {"status": "finished", "finish_reason": "stop", "error": None,
                                               "text": "done", "usage": {"totalTokens": 3}, "tripwire": None}},
    "store/stale-epoch": {"plan": "store", "epoch": 4},
    "store/stale-attempt": {"plan": "store", "attempt": 1},
    # store and claim the next step
    "claim/first": {"plan": "claim"},
    "claim/later": {"plan": "claim", "continued_from": 0},
    "claim/aborted": {"plan": "claim", "status": "aborted"},
    "claim/moved": {"plan": "claim", "run_step": 2},
    "claim/stale-epoch": {"plan": "claim", "epoch": 4},
    "claim/stale-attempt": {"plan": "claim", "attempt": 1},
    # store, claim and announce
    "announce/first": {"plan": "announce", "results_applied": 1},
    "announce/later": {"plan": "announce", "continued_from": 0, "results_applied": 1},
    "announce/start-unannounced": {"plan": "announce", "results_applied": 1, "start_announced": False},
    "announce/own-unpublished": {"plan": "announce", "results_applied": 1, "unpublished": "own"},
    "announce/other-unpublished": {"plan": "announce", "results_applied": 1, "unpublished": "other"},
    "announce/earlier-not-applied": {"plan": "announce", "results_applied": 0},
    "announce/aborted": {"plan": "announce", "status": "aborted", "results_applied": 1},
    "announce/moved": {"plan": "announce", "run_step": 2, "results_applied": 1},
    "announce/stale-epoch": {"plan": "announce", "epoch": 4, "results_applied": 1},
    "announce/stale-attempt": {"plan": "announce", "attempt": 1, "results_applied": 1},
}
"""Each case: ``plan`` (what the worker asks), the run's row where it differs from a run at step 1,
attempt 2, running at epoch 3 (``run_step``, ``status``, ``continued_from``, ``results_applied``,
``start_announced``; ``unpublished``: a lifecycle row of the thread not yet published, the
worker's ``own`` or an ``other`` writer's), and the save's ``epoch``/``attempt``/``final``."""

VOLATILE = {"created_at", "updated_at", "step_heartbeat", "consumed_at", "expires_at", "heartbeat", "box", "id",
            "seq", "position", "published_at", "finished_at", "history_at"}


async def set_up(conn: asyncpg.Connection, p: str, case: dict[str, Any]) -> list[int]:
    """The case's run (ids prefixed ``p``) with two stored messages and two pending signals; returns
    the outbox ids of the worker's own unpublished lifecycle rows."""
    await leased_run(conn, run_id=f"{p}-r", thread_id=f"{p}-t", resource_id="res", step=case.get("run_step", 1),
                     steps_done=case.get("run_step", 1), attempt=2, status=case.get("status", "running"),
                     step_started=True, step_owner="w1", step_heartbeat=datetime.now(UTC), next_seq=2000000,
                     continued_from=case.get("continued_from"), options={"maxSteps": 5}, state={"old": True},
                     results_applied=case.get("results_applied", 0),
                     start_announced=case.get("start_announced", True))
    await conn.execute("INSERT INTO messages (id, thread_id, resource_id, run_id, role, content) VALUES "
                       "($1, $2, 'res', $3, 'user', $4), ($5, $2, 'res', $3, 'assistant', $4)",
                       f"{p}-m0", f"{p}-t", f"{p}-r", {"parts": ["old"]}, f"{p}-gone")
    for name in ("consumed", "pending"):
        await conn.execute("INSERT INTO signals (id, thread_id, resource_id, type, mode, status, run_id, payload) "
                           "VALUES ($1, $2, 'res', 'user', 'deliver', 'pending', $3, $4)",
                           f"{p}-s-{name}", f"{p}-t", f"{p}-r", {"text": name})
    if "unpublished" not in case:
        return []
    box = await conn.fetchval("INSERT INTO outbox (topic, key, value) VALUES ('lifecycle', $1, $2) RETURNING id",
                              f"res:{p}-t", b'{"e": "earlier"}')
    return [box] if case["unpublished"] == "own" else []


def messages(p: str) -> list[dict[str, Any]]:
    """The run's messages the save stores (the first as stored, the second new)."""
    return [{"id": f"{p}-m0", "role": "user", "type": None, "content": {"parts": ["old"]}},
            {"id": f"{p}-m1", "role": "assistant", "type": "text", "content": {"parts": ["new"]}}]


def lifecycle() -> tuple[list[bytes], int]:
    """The lifecycle records an announcing save queues, and how many of them are the run's start."""
    return [*_LIFE_START, *_LIFE_STEP], len(_LIFE_START)


async def snapshot(conn: asyncpg.Connection, p: str) -> dict[str, Any]:
    """Every row of the case's run the save may touch, volatile columns left out."""
    tables = {"runs": ("SELECT * FROM runs WHERE run_id = $1", f"{p}-r"),
              "lease": ("SELECT *, expires_at > now() + interval '20 s' AS renewed FROM thread_leases "
                        "WHERE thread_id = $1", f"{p}-t"),
              "messages": ("SELECT * FROM messages WHERE thread_id = $1 ORDER BY id", f"{p}-t"),
              "signals": ("SELECT * FROM signals WHERE thread_id = $1 ORDER BY id", f"{p}-t"),
              "outbox": ("SELECT * FROM outbox WHERE key = $1 ORDER BY id", f"res:{p}-t")}
    out: dict[str, Any] = {}
    for name, (sql, arg) in tables.items():
        out[name] = [{k: v for k, v in dict(r).items() if k not in VOLATILE} for r in await conn.fetch(sql, arg)]
    out["heartbeat_set"] = await conn.fetchval("SELECT step_heartbeat IS NOT NULL FROM runs WHERE run_id = $1",
                                               f"{p}-r")
    return out


def neutral(value: Any, p: str) -> Any:
    """``value`` as JSON with the case's prefix ``p`` replaced, comparable across cases."""
    return orjson.loads(orjson.dumps(value, default=str).decode().replace(p, "P"))
