"""Schema migrations, applied by yoyo-migrations: the expand migrations of ``store/migrations/*.sql``
at every service start and by ``threadline migrate``, the contract migrations of
``store/migrations/contract/*.sql`` (removing what a previous release still used) only when asked,
once that release's processes are gone (``threadline migrate --contract``; docs/decisions.md, 113)."""

from __future__ import annotations

from pathlib import Path

from yoyo import get_backend, read_migrations

from threadline.logging import get_logger
from threadline.store.dsn import yoyo_uri

log = get_logger(__name__)

MIGRATIONS = Path(__file__).with_name("migrations")
"""The expand migrations: what a release adds, kept usable by the previous release's processes."""
CONTRACT = MIGRATIONS / "contract"
"""The contract migrations: what only a previous release used, removed once none of its processes
runs (each depends on the expand migration that replaced what it removes, never the reverse)."""

LOCK_KEY = 0x7468726C6D6967  # "thrlmig": the advisory lock of Threadline's migrators
"""Key of the session-level advisory lock one migrator holds at a time (a bigint)."""


def migrate(dsn: str, *, contract: bool = False) -> list[str]:
    """Apply the pending expand migrations (and, with ``contract``, the pending contract ones too);
    return the ids applied, in the order applied.

    yoyo records a migration by its id (the file name), not its text: an applied migration is
    never applied again, whatever its file says now.

    One migrator at a time holds a session-level advisory lock (``LOCK_KEY``) on its own
    connection: PostgreSQL releases it when that session ends, so a migrator killed mid-way
    (``kill -9``, an OOM) leaves no lock behind. yoyo's own lock is a row in ``yoyo_lock`` that a
    killed migrator leaves in place (every later start would wait on it and fail); under the
    advisory lock no other migrator of ours is alive, so such a row is stale and is removed.

    Args:
        dsn: a direct (session) PostgreSQL DSN, not a transaction-pooling PgBouncer; with a
            standby, the multi-host URI of :mod:`threadline.store.dsn` (the migrations run on
            the host that accepts writes).
        contract: also apply :data:`CONTRACT`'s migrations: only once no process of the previous
            release runs (they may remove what it calls).

    Raises:
        psycopg.OperationalError: PostgreSQL cannot be reached.
    """
    backend = get_backend(yoyo_uri(dsn))
    migrations = read_migrations(*(str(d) for d in ([MIGRATIONS, CONTRACT] if contract else [MIGRATIONS])))
    conn = backend.connection
    with conn.cursor() as cur:  # waits while another migrator runs
        cur.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
        cur.execute(f"SELECT count(*) FROM {backend.lock_table_quoted}")
        stale = cur.fetchone()[0]
    conn.commit()
    try:
        if stale:
            log.warning("removing a migration lock left by a migrator that died", rows=stale)
            backend.break_lock()
        with backend.lock():
            pending = backend.to_apply(migrations)
            backend.apply_migrations(pending)
        return [m.id for m in pending]
    finally:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))
        conn.commit()
        conn.close()
