"""Faults a retry can cure, for every layer: Kafka's and Postgres's lost or refused connections
(including a terminated backend and a server restarting), timeouts (a pool wait), serialisation
conflicts and deadlocks. Constraint violations, syntax and data errors are not among them.

And the one way to retry them: :func:`retrying`, with a named :class:`Backoff` per use.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg
from aiokafka.errors import KafkaError
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    stop_any,
    stop_never,
    wait_exponential,
)

TRANSIENT_PG: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError, asyncpg.InterfaceError, asyncpg.TooManyConnectionsError,
    asyncpg.exceptions.AdminShutdownError, asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.CannotConnectNowError, asyncpg.exceptions.IdleSessionTimeoutError,
    asyncpg.exceptions.IdleInTransactionSessionTimeoutError, asyncpg.exceptions.InternalClientError,
    asyncpg.exceptions.SerializationError, asyncpg.exceptions.DeadlockDetectedError,
    asyncpg.exceptions.ReadOnlySQLTransactionError)
"""Postgres faults a retry can cure: a lost or refused connection (class 08, a terminated
backend 57P01, a server starting or stopping 57P03, a session the server closed for idling
57P05 / 25P03), a connection whose protocol state was left mid-operation (asyncpg's
``InternalClientError``, e.g. "cannot switch to state 12; another operation is in progress"
after a server restart, or ``TargetServerAttributeNotMatched``: no host of a multi-host DSN
accepts writes yet, a failover in progress; :meth:`threadline.store.db.Database.connection`
terminates such a connection instead of pooling it again), a write refused because the server
is read-only (25006: a connection left on a standby or a demoted primary during a failover,
terminated too, so the retry's new connection finds the read-write host; decision 209), too
many connections, serialisation conflicts and deadlocks."""

TRANSIENT: tuple[type[BaseException], ...] = (OSError, asyncio.TimeoutError, KafkaError, *TRANSIENT_PG)
"""Faults worth retrying anywhere: :data:`TRANSIENT_PG`, Kafka errors, OS-level connection
errors and timeouts."""


def is_transient_pg(exc: BaseException) -> bool:
    """True for a Postgres fault worth retrying (see :data:`TRANSIENT_PG`)."""
    return isinstance(exc, TRANSIENT_PG)


def is_transient(exc: BaseException) -> bool:
    """True for a fault that a retry can cure (see :data:`TRANSIENT`)."""
    return isinstance(exc, TRANSIENT)


@dataclass(frozen=True, slots=True)
class Backoff:
    """The waits between a retry's attempts (seconds): ``first_s`` after the first failure, then
    doubling, never more than ``max_s``."""

    first_s: float
    max_s: float


RECORD_BACKOFF = Backoff(first_s=0.1, max_s=5.0)
"""A consumed record's handler (:func:`threadline.kafka.handling.guarded`)."""
DEAD_LETTER_BACKOFF = Backoff(first_s=0.2, max_s=5.0)
"""Publishing a dead letter (:class:`threadline.kafka.handling.DeadLetters`)."""
DEAD_LETTER_RETRY_S = 120.0
"""How long a dead letter's publish is retried: its record's offset is committed once it returns."""
STORE_BACKOFF = Backoff(first_s=0.1, max_s=2.0)
"""A write a step waits for (a tool result, a workflow journal entry)."""
CONNECT_BACKOFF = Backoff(first_s=0.5, max_s=5.0)
"""A service's start-up connections: a broker that is away is waited for, never a reason to exit."""
TICK_BACKOFF = Backoff(first_s=0.2, max_s=3.0)
"""One pass of a periodic task (the notification-scheduler's delivery tick)."""
TICK_RETRY_S = 30.0
"""How long one periodic pass is retried before it is logged as failed (the next tick tries again)."""


def retrying(backoff: Backoff, *, for_s: float | None = None, attempts: int | None = None,
             before_sleep: Callable[[RetryCallState], None] | None = None) -> AsyncRetrying:
    """The one retry loop: ``async for attempt in retrying(...): with attempt: ...`` retries the
    block on a transient fault (:func:`is_transient`), waiting as ``backoff`` says, and raises any
    other error at once.

    Stops after ``for_s`` seconds or ``attempts`` attempts (the first that comes), retrying for
    ever when neither is given; then raises what the last attempt raised. ``before_sleep`` is
    called with tenacity's state before each wait (to count or log the retry).
    """
    stops = ([stop_after_delay(for_s)] if for_s is not None else []) + (
        [stop_after_attempt(attempts)] if attempts is not None else [])
    return AsyncRetrying(retry=retry_if_exception(is_transient), stop=stop_any(*stops) if stops else stop_never,
                         wait=wait_exponential(multiplier=backoff.first_s, max=backoff.max_s),
                         before_sleep=before_sleep, reraise=True)
