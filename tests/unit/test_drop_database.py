"""``drop_database`` (the test sessions' teardown) on a PostgreSQL that refuses ``WITH (FORCE)``:
CI's teardown of a module's database failed with ``InsufficientPrivilegeError`` ("must be a member
of the role whose process is being terminated") when an autovacuum worker was on the database,
because ``make infra-up``'s role is no superuser. The fallback drops it without ``FORCE``."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from threadline.testing import harness


class _Conn:
    """Answers the statements as a PostgreSQL with an autovacuum worker on the database would:
    ``FORCE`` refused; a plain drop in use ``busy`` times (the worker has not exited yet)."""

    def __init__(self, busy: int) -> None:
        self.busy = busy
        self.statements: list[str] = []
        self.closed = False

    async def execute(self, sql: str, *args: Any) -> str:
        self.statements.append(sql)
        if "WITH (FORCE)" in sql:
            raise asyncpg.exceptions.InsufficientPrivilegeError(
                "must be a member of the role whose process is being terminated or member of pg_signal_backend")
        if sql.startswith("DROP DATABASE") and self.busy:
            self.busy -= 1
            raise asyncpg.exceptions.ObjectInUseError("database is being accessed by other users")
        return "OK"

    async def close(self) -> None:
        self.closed = True


def _patch(monkeypatch: pytest.MonkeyPatch, conn: _Conn) -> None:
    async def connect(dsn: str) -> _Conn:
        return conn

    monkeypatch.setattr(asyncpg, "connect", connect)


def test_a_refused_force_drop_falls_back_to_ending_its_own_backends_and_a_plain_drop(monkeypatch):
    conn = _Conn(busy=0)
    _patch(monkeypatch, conn)
    assert asyncio.run(harness.drop_database("postgresql://x/admin", "tl_own_1", pause_s=0))
    assert conn.statements[0] == 'DROP DATABASE IF EXISTS "tl_own_1" WITH (FORCE)'
    assert "pg_terminate_backend" in conn.statements[1] and "current_user" in conn.statements[1]
    assert conn.statements[2] == 'DROP DATABASE IF EXISTS "tl_own_1"'
    assert conn.closed


def test_a_database_still_in_use_is_tried_again_then_left_behind_without_an_error(monkeypatch, capsys):
    conn = _Conn(busy=2)
    _patch(monkeypatch, conn)
    assert asyncio.run(harness.drop_database("postgresql://x/admin", "tl_own_2", pause_s=0))
    assert conn.statements.count('DROP DATABASE IF EXISTS "tl_own_2"') == 3

    stuck = _Conn(busy=10**6)
    _patch(monkeypatch, stuck)
    assert not asyncio.run(harness.drop_database("postgresql://x/admin", "tl_own_3", attempts=3, pause_s=0))
    assert "tl_own_3 is still in use after 3 attempts" in capsys.readouterr().err
    assert stuck.closed
