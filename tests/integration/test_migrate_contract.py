"""Expand and contract (docs/decisions.md, 113): a service's start and ``threadline migrate`` apply
the expand migrations only, so a database upgraded from 0026 keeps the save functions a worker of
the previous release calls while the release rolls out; ``threadline migrate --contract`` drops
them afterwards. A database where an earlier 0027 already dropped them (yoyo records a migration
by its id, not its text, so the edited 0027 is not applied again) contracts cleanly."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from yoyo import get_backend, read_migrations
from yoyo.migrations import MigrationList

from threadline.store.dsn import yoyo_uri
from threadline.store.migrate import CONTRACT, MIGRATIONS, migrate

PREVIOUS_RELEASE_SAVES = {
    # what the release before 0027 calls (its store.steps), by the signatures 0011, 0013, 0017 and
    # 0026 created; the bodies here only stand in for theirs (the functions' text left those
    # migrations with 0027, so a fresh database never has them)
    "threadline_save_step": "p_run_id text, p_epoch bigint, p_step integer, p_attempt integer, p_ttl_s float8, "
                            "p_messages jsonb, p_consumed text[], p_state jsonb, p_next_seq bigint, p_final jsonb, "
                            "p_topic text, p_key text, p_headers jsonb, p_value bytea",
    "threadline_save_step_continue": "p_run_id text, p_epoch bigint, p_step integer, p_attempt integer, "
                                     "p_ttl_s float8, p_messages jsonb, p_consumed text[], p_state jsonb, "
                                     "p_next_seq bigint, p_topic text, p_key text, p_headers jsonb, p_value bytea, "
                                     "p_owner text, p_seq_block bigint",
    "threadline_save_step_claim": "p_run_id text, p_epoch bigint, p_step integer, p_attempt integer, "
                                  "p_ttl_s float8, p_messages jsonb, p_consumed text[], p_state jsonb, "
                                  "p_next_seq bigint, p_topic text, p_key text, p_headers jsonb, p_value bytea, "
                                  "p_owner text, p_seq_block bigint",
    "threadline_save_step_announce": "p_run_id text, p_epoch bigint, p_step integer, p_attempt integer, "
                                     "p_ttl_s float8, p_messages jsonb, p_consumed text[], p_state jsonb, "
                                     "p_next_seq bigint, p_topic text, p_key text, p_headers jsonb, p_value bytea, "
                                     "p_owner text, p_seq_block bigint, p_life_topic text, p_life_headers jsonb, "
                                     "p_life bytea[], p_start_rows integer, p_own bigint[]",
}
STAND_IN = "RETURNS bigint LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'stale writer' USING ERRCODE = 'TLSTW'; END $$"
"""A stand-in body: the previous release's save fenced out on a run it does not hold."""


def _ids(folder) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.sql"))


def _migrate_before(dsn: str, first_not: str) -> None:
    """Apply the expand migrations whose id sorts before ``first_not``: a database of that release."""
    backend = get_backend(yoyo_uri(dsn))
    try:
        with backend.lock():
            backend.apply_migrations(backend.to_apply(
                MigrationList(m for m in read_migrations(str(MIGRATIONS)) if m.id < first_not)))
    finally:
        backend.connection.close()


async def _sql(dsn: str, *statements: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        rows: list[asyncpg.Record] = []
        for statement in statements:
            rows = await conn.fetch(statement)
        return rows
    finally:
        await conn.close()


def _saves(dsn: str) -> dict[str, int]:
    rows = asyncio.run(_sql(dsn, "SELECT proname, count(*) AS n FROM pg_proc WHERE proname LIKE 'threadline_save_step%' "
                                 "GROUP BY proname"))
    return {r["proname"]: r["n"] for r in rows}


def test_expand_keeps_the_previous_releases_saves_until_the_contract(fresh_db: str) -> None:
    _migrate_before(fresh_db, "0027")
    asyncio.run(_sql(fresh_db, *(f"CREATE FUNCTION {name}({params}) {STAND_IN}"
                                 for name, params in PREVIOUS_RELEASE_SAVES.items())))

    assert migrate(fresh_db) == [i for i in _ids(MIGRATIONS) if i >= "0027"]  # what a new release's start does
    # the old save takes the old signature beside the new one of 0027; an old worker's call still runs it
    assert _saves(fresh_db) == {"threadline_save_step": 2, "threadline_save_step_continue": 1,
                                "threadline_save_step_claim": 1, "threadline_save_step_announce": 1}
    with pytest.raises(asyncpg.PostgresError) as fenced:
        asyncio.run(_sql(fresh_db, "SELECT threadline_save_step('run-x'::text, 1::bigint, 0::int, 1::int, 60::float8, "
                                   "'[]'::jsonb, NULL::text[], '{}'::jsonb, 0::bigint, NULL::jsonb, 't'::text, "
                                   "'k'::text, '{}'::jsonb, ''::bytea)"))
    assert fenced.value.sqlstate == "TLSTW"

    assert migrate(fresh_db, contract=True) == _ids(CONTRACT)  # once the previous release is gone
    assert _saves(fresh_db) == {"threadline_save_step": 1}
    new = asyncio.run(_sql(fresh_db, "SELECT pg_get_function_identity_arguments('threadline_save_step'::regproc) AS a"))
    assert "p_claim jsonb" in new[0]["a"]  # 0027's is the one left


def test_a_database_where_0027_dropped_them_contracts_cleanly(fresh_db: str) -> None:
    assert migrate(fresh_db) == _ids(MIGRATIONS)  # expand only: no contract migration applied
    assert migrate(fresh_db, contract=True) == _ids(CONTRACT)
    assert migrate(fresh_db, contract=True) == [] and migrate(fresh_db) == []
    assert _saves(fresh_db) == {"threadline_save_step": 1}
