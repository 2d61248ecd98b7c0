"""Migrations under a PostgreSQL advisory lock: a migrator killed mid-way blocks no later start,
and two migrators at once apply each migration once."""

from __future__ import annotations

import asyncio
import time

import asyncpg
from yoyo import get_backend

from threadline.store.dsn import yoyo_uri
from threadline.store.migrate import LOCK_KEY, MIGRATIONS, migrate


async def _fetch(dsn: str, sql: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetch(sql)
    finally:
        await conn.close()


def test_a_lock_row_left_by_a_killed_migrator_does_not_block_the_next_start(fresh_db: str) -> None:
    # what a migrator killed while holding yoyo's lock leaves behind: its row, with a dead pid
    get_backend(yoyo_uri(fresh_db)).connection.close()  # creates yoyo_lock
    asyncio.run(_fetch(fresh_db, "INSERT INTO yoyo_lock (locked, ctime, pid) VALUES (1, now(), 999999) RETURNING pid"))
    assert len(asyncio.run(_fetch(fresh_db, "SELECT * FROM yoyo_lock"))) == 1
    t0 = time.monotonic()
    applied = migrate(fresh_db)  # before: waited yoyo's 10 s and raised LockTimeout
    assert time.monotonic() - t0 < 60  # a bound for a hang, not a speed figure
    assert len(applied) == len(list(MIGRATIONS.glob("*.sql")))
    assert asyncio.run(_fetch(fresh_db, "SELECT * FROM yoyo_lock")) == []
    # this database's (pg_locks lists every database's: other tests migrate theirs at the same time);
    # the migrator's backend exits just after its connection closes, so it is looked for a while
    advisory = (f"SELECT * FROM pg_locks WHERE locktype = 'advisory' AND objid = {LOCK_KEY & 0xFFFFFFFF} "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")
    deadline = time.monotonic() + 10
    while (held := asyncio.run(_fetch(fresh_db, advisory))) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held == []  # the advisory lock went with the migrator's session


def test_two_migrators_at_once_apply_each_migration_once(fresh_db: str) -> None:
    async def both() -> list[list[str]]:
        return list(await asyncio.gather(asyncio.to_thread(migrate, fresh_db), asyncio.to_thread(migrate, fresh_db)))

    first, second = asyncio.run(both())
    assert sorted([len(first), len(second)]) == [0, len(list(MIGRATIONS.glob("*.sql")))]
    assert migrate(fresh_db) == []
