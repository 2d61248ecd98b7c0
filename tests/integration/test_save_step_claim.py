"""Migration 0017's one-pass ``threadline_save_step_claim`` (decision 49) writes and returns what
0013's ``threadline_save_step_continue`` does, in every case the worker meets: a continued step
(first and later), a pending signal drained and a consumed one, a run aborted meanwhile, a run the
orchestrator already moved, a stale epoch and a stale attempt. Each case is set up twice, alike
but for its ids; one copy goes through each function and everything both touched is compared."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg
import orjson
import pytest

from tests.integration.pg import leased_run
from threadline.store import steps
from threadline.store.db import connect

_ARGS = ("($1::text, $2::bigint, $3::int, $4::int, $5::float8, $6::jsonb, $7::text[], $8::jsonb, $9::bigint, "
         "$10::text, $11::text, $12::jsonb, $13::bytea, $14::text, $15::bigint)")
_VOLATILE = {"created_at", "updated_at", "step_heartbeat", "consumed_at", "expires_at", "heartbeat", "box", "id",
             "seq", "position", "published_at", "finished_at", "history_at"}


async def _setup(conn: asyncpg.Connection, p: str, case: dict[str, Any]) -> None:
    await leased_run(conn, run_id=f"{p}-r", thread_id=f"{p}-t", resource_id="res", step=case.get("run_step", 1),
                     steps_done=case.get("run_step", 1), attempt=2, status=case.get("status", "running"),
                     step_started=True, step_owner="w1", step_heartbeat=datetime.now(UTC), next_seq=2000000,
                     continued_from=case.get("continued_from"), options={"maxSteps": 5}, state={"old": True})
    await conn.execute("INSERT INTO messages (id, thread_id, resource_id, run_id, role, content) VALUES "
                       "($1, $2, 'res', $3, 'user', $4), ($5, $2, 'res', $3, 'assistant', $4)",
                       f"{p}-m0", f"{p}-t", f"{p}-r", {"parts": ["old"]}, f"{p}-gone")
    for name, mode in (("consumed", "deliver"), ("pending", "deliver")):
        await conn.execute("INSERT INTO signals (id, thread_id, resource_id, type, mode, status, run_id, payload) "
                           "VALUES ($1, $2, 'res', 'user', $3, 'pending', $4, $5)",
                           f"{p}-s-{name}", f"{p}-t", mode, f"{p}-r", {"text": name})


async def _call(conn: asyncpg.Connection, fn: str, p: str, case: dict[str, Any],
                extra: tuple[Any, ...] = ()) -> dict[str, Any]:
    """Call ``fn`` with the case's arguments; ``extra``: migration 0026's five more (topic, headers,
    values, start rows, own ids)."""
    args = _ARGS[:-1] + ", $16::text, $17::jsonb, $18::bytea[], $19::int, $20::bigint[])" if extra else _ARGS
    msgs = [{"id": f"{p}-m0", "role": "user", "type": None, "content": {"parts": ["old"]}},
            {"id": f"{p}-m1", "role": "assistant", "type": "text", "content": {"parts": ["new"]}}]
    try:
        async with conn.transaction():
            row = await conn.fetchrow(
                f"SELECT * FROM {fn}{args}", f"{p}-r", case.get("epoch", 3), 1, case.get("attempt", 2), 30.0, msgs,
                [f"{p}-s-consumed"], {"step": 1, "ml": msgs}, 3000123, "step-results", f"res:{p}-t",
                [["h", "v"]], p.encode(), "w2", 1_000_000, *extra)
    except asyncpg.PostgresError as exc:
        return {"error": exc.sqlstate}
    assert row is not None
    return {**dict(row), "stored": row["box"] is not None}


async def _snapshot(conn: asyncpg.Connection, p: str) -> dict[str, Any]:
    tables = {"runs": ("SELECT * FROM runs WHERE run_id = $1", f"{p}-r"),
              "lease": ("SELECT *, expires_at > now() + interval '20 s' AS renewed FROM thread_leases "
                        "WHERE thread_id = $1", f"{p}-t"),
              "messages": ("SELECT * FROM messages WHERE thread_id = $1 ORDER BY id", f"{p}-t"),
              "signals": ("SELECT * FROM signals WHERE thread_id = $1 ORDER BY id", f"{p}-t"),
              "outbox": ("SELECT * FROM outbox WHERE key = $1 ORDER BY id", f"res:{p}-t")}
    out = {}
    for name, (sql, arg) in tables.items():
        out[name] = [{k: v for k, v in dict(r).items() if k not in _VOLATILE} for r in await conn.fetch(sql, arg)]
    out["heartbeat_set"] = await conn.fetchval("SELECT step_heartbeat IS NOT NULL FROM runs WHERE run_id = $1",
                                               f"{p}-r")
    return out


def _neutral(value: Any, p: str) -> Any:
    return orjson.loads(orjson.dumps(value, default=str).decode().replace(p, "P"))


@pytest.mark.parametrize("case", [
    {},                                        # the first continued step: continued_from set
    {"continued_from": 0},                     # a later one: continued_from kept
    {"status": "aborted"},                     # aborted meanwhile: stored, not advanced
    {"run_step": 2},                           # the orchestrator moved the run: stored, not advanced
    {"epoch": 4},                              # another run holds the thread: stale, nothing written
    {"attempt": 1},                            # a later attempt took over: stale, nothing written
], ids=["first", "later", "aborted", "moved", "stale-epoch", "stale-attempt"])
async def test_the_one_pass_statement_does_what_the_two_pass_one_did(own_cluster, case):
    conn = await connect(own_cluster.dsn)
    try:
        seen = {}
        for fn in ("threadline_save_step_continue", "threadline_save_step_claim"):
            p = f"{fn[-5:]}{uuid.uuid4().hex[:8]}"
            await _setup(conn, p, case)
            returned = await _call(conn, fn, p, case)
            seen[fn] = _neutral({"returned": {k: v for k, v in returned.items() if k not in _VOLATILE},
                                 **(await _snapshot(conn, p))}, p)
        old, new = seen["threadline_save_step_continue"], seen["threadline_save_step_claim"]
        assert new == old
        if not case or "continued_from" in case:  # the cases exercise what they claim to
            assert old["returned"]["outcome"] == "claimed" and old["runs"][0]["step"] == 2
            assert old["runs"][0]["continued_from"] == case.get("continued_from", 1)
            assert [s["drained_step"] for s in old["signals"]] == [None, 2]
        elif "epoch" in case or "attempt" in case:
            assert old["returned"] == {"error": "TLSTW"}
        else:
            assert old["returned"]["outcome"] is None and old["returned"]["stored"]
    finally:
        await conn.close()


async def test_the_workers_select_names_every_column_of_the_function_but_the_state(own_cluster):
    """The worker selects the lean function's columns by name, leaving out ``state`` (it holds the
    state it stored): a column the function gains is read too, or this fails."""
    conn = await connect(own_cluster.dsn)
    try:
        names = await conn.fetchval(
            "SELECT array_agg(n ORDER BY i) FROM pg_proc p, unnest(p.proargnames, p.proargmodes) "
            "WITH ORDINALITY AS a(n, m, i) WHERE p.proname = 'threadline_save_step_claim' AND m = 'o'")
    finally:
        await conn.close()
    selected = steps._SAVE_CLAIM.split("FROM")[0].removeprefix("SELECT ").split(", ")
    assert [n for n in names if n != "state"] == [c.strip() for c in selected]
