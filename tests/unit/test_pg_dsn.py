"""Multi-host PostgreSQL URIs (a primary and its standby, :mod:`threadline.store.dsn`) and what a
failover's errors mean to the store (decision 209): a write refused as read-only and a connect
that finds no read-write host are transient, and a connection left on a read-only server is
never pooled again."""

from __future__ import annotations

import asyncpg
import pytest
from yoyo.connections import parse_uri

from threadline.store.db import _broken
from threadline.store.dsn import PgAddress, addresses, describe, multi_host, with_database, yoyo_uri
from threadline.transient import is_transient, is_transient_pg

pytestmark = pytest.mark.unit

PAIR = "postgresql://threadline:threadline@127.0.0.1:15432,127.0.0.1:15433/threadline?target_session_attrs=read-write"


@pytest.mark.parametrize(("dsn", "expected"), [
    pytest.param(PAIR, [("127.0.0.1", 15432), ("127.0.0.1", 15433)], id="two-hosts"),
    pytest.param("postgresql://u:p@db/x", [("db", 5432)], id="default-port"),
    pytest.param("postgres://u@[::1]:6000,db2/x", [("::1", 6000), ("db2", 5432)], id="ipv6-and-default"),
    pytest.param("postgresql:///x?host=a,b&port=1,2", [("a", 1), ("b", 2)], id="query-hosts"),
    pytest.param("postgresql:///x?host=a,b&port=7", [("a", 7), ("b", 7)], id="one-port-for-all"),
    pytest.param("postgresql:///x", [("localhost", 5432)], id="no-host"),
    pytest.param("postgresql://u:p%40ss@h:1/x", [("h", 1)], id="at-sign-in-password"),
])
def test_addresses_in_the_order_a_connection_tries_them(dsn: str, expected: list[tuple[str, int]]) -> None:
    assert addresses(dsn) == tuple(PgAddress(h, p) for h, p in expected)


@pytest.mark.parametrize("dsn", ["mysql://u@h/x", "postgresql://u@h:port/x", "postgresql:///x?host=a,b&port=1,2,3"])
def test_a_uri_it_cannot_read_is_refused(dsn: str) -> None:
    with pytest.raises(ValueError):
        addresses(dsn)


def test_describe_names_every_server_and_never_the_password() -> None:
    assert describe(PAIR) == "127.0.0.1:15432,127.0.0.1:15433"
    assert describe("postgresql://u:secret@[::1]:6000/x") == "[::1]:6000"


def test_with_database_keeps_hosts_user_and_parameters() -> None:
    assert with_database(PAIR, "tl_test_1") == PAIR.replace("/threadline?", "/tl_test_1?")
    assert with_database("postgresql://u:p@h:1/x", "y") == "postgresql://u:p@h:1/y"


def test_multi_host_builds_the_pair_uri() -> None:
    servers = [PgAddress("127.0.0.1", 15432), PgAddress("127.0.0.1", 15433)]
    assert multi_host(servers, user="threadline", password="threadline", database="threadline") == PAIR
    with pytest.raises(ValueError, match="no server"):
        multi_host([], user="u", password="p", database="d")


def test_yoyo_reads_a_multi_host_uri_as_host_and_port_lists() -> None:
    """yoyo parses the authority itself and would fail on ``15432,127.0.0.1:15433`` as a port."""
    parsed = parse_uri(yoyo_uri(PAIR))
    assert (parsed.scheme, parsed.hostname, parsed.port, parsed.database) == ("postgresql+psycopg", None, None,
                                                                               "threadline")
    assert parsed.args == {"target_session_attrs": "read-write", "host": "127.0.0.1,127.0.0.1",
                           "port": "15432,15433"}
    assert (parsed.username, parsed.password) == ("threadline", "threadline")


def test_yoyo_uri_of_one_host_only_changes_the_scheme() -> None:
    assert yoyo_uri("postgres://u:p@h:1/x?sslmode=disable") == "postgresql+psycopg://u:p@h:1/x?sslmode=disable"


@pytest.mark.parametrize("exc", [
    pytest.param(asyncpg.exceptions.ReadOnlySQLTransactionError(
        "cannot execute INSERT in a read-only transaction"), id="read-only"),
    pytest.param(asyncpg.exceptions.TargetServerAttributeNotMatched(
        "None of the hosts match the target attribute requirement"), id="no-read-write-host"),
])
def test_a_failover_in_progress_is_transient_and_ends_the_connection(exc: BaseException) -> None:
    assert is_transient_pg(exc)
    assert is_transient(exc)
    assert _broken(exc)


def test_a_constraint_violation_is_neither() -> None:
    exc = asyncpg.exceptions.UniqueViolationError("duplicate key")
    assert not is_transient_pg(exc)
    assert not _broken(exc)
