"""Schema migrations, applied by yoyo-migrations from ``store/migrations/*.sql``."""

from __future__ import annotations

from pathlib import Path

from yoyo import get_backend, read_migrations

MIGRATIONS = Path(__file__).with_name("migrations")


def _yoyo_uri(dsn: str) -> str:
    # yoyo selects its driver from the scheme; psycopg 3 is "postgresql+psycopg"
    for scheme in ("postgresql://", "postgres://"):
        if dsn.startswith(scheme):
            return "postgresql+psycopg://" + dsn[len(scheme):]
    return dsn


def migrate(dsn: str) -> list[str]:
    """Apply pending migrations (under yoyo's lock); return the ids applied."""
    backend = get_backend(_yoyo_uri(dsn))
    migrations = read_migrations(str(MIGRATIONS))
    with backend.lock():
        pending = backend.to_apply(migrations)
        backend.apply_migrations(pending)
    return [m.id for m in pending]
