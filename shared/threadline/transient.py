"""Faults a retry can cure, for every layer: Kafka's and Postgres's lost or refused connections
(including a terminated backend and a server restarting), timeouts (a pool wait), serialisation
conflicts and deadlocks. Constraint violations, syntax and data errors are not among them."""

from __future__ import annotations

import asyncio

import asyncpg
from aiokafka.errors import KafkaError

TRANSIENT_PG: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError, asyncpg.InterfaceError, asyncpg.TooManyConnectionsError,
    asyncpg.exceptions.AdminShutdownError, asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.CannotConnectNowError, asyncpg.exceptions.IdleSessionTimeoutError,
    asyncpg.exceptions.IdleInTransactionSessionTimeoutError, asyncpg.exceptions.InternalClientError,
    asyncpg.exceptions.SerializationError, asyncpg.exceptions.DeadlockDetectedError)
"""Postgres faults a retry can cure: a lost or refused connection (class 08, a terminated
backend 57P01, a server starting or stopping 57P03, a session the server closed for idling
57P05 / 25P03), a connection whose protocol state was left mid-operation (asyncpg's
``InternalClientError``, e.g. "cannot switch to state 12; another operation is in progress"
after a server restart; :meth:`threadline.store.db.Database.connection` terminates such a
connection instead of pooling it again), too many connections, serialisation conflicts and
deadlocks."""

TRANSIENT: tuple[type[BaseException], ...] = (OSError, asyncio.TimeoutError, KafkaError, *TRANSIENT_PG)
"""Faults worth retrying anywhere: :data:`TRANSIENT_PG`, Kafka errors, OS-level connection
errors and timeouts."""


def is_transient_pg(exc: BaseException) -> bool:
    """True for a Postgres fault worth retrying (see :data:`TRANSIENT_PG`)."""
    return isinstance(exc, TRANSIENT_PG)


def is_transient(exc: BaseException) -> bool:
    """True for a fault that a retry can cure (see :data:`TRANSIENT`)."""
    return isinstance(exc, TRANSIENT)
