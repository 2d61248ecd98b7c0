"""What every service shares: settings, logging, the Postgres pool, the producer, topic admin,
the outbox relay, dead letters, the keyed consumer, and the FastStream application shell
(lifespan and signal handling). A service subclasses :class:`Service` and implements ``handle``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog
from tenacity import RetryCallState

from threadline._internal import gc_tuning, usercode
from threadline.config import Settings, get_settings
from threadline.errors import InvalidEventError
from threadline.flows.publish import Outbox, OutboxRelay
from threadline.kafka.admin import TopicAdmin
from threadline.kafka.consumer import KeyedConsumer, Record
from threadline.kafka.handling import DeadLetters, guarded
from threadline.kafka.layout import ensure_shared_chunks
from threadline.kafka.producer import Producer
from threadline.kafka.security import client_kwargs
from threadline.logging import configure, get_logger
from threadline.ops import tracing
from threadline.store.chunk_topics import ChunkTopicRegistry, chunk_topic_trust_s
from threadline.store.db import Database
from threadline.store.migrate import migrate
from threadline.store.payloads import PayloadStore
from threadline.topics import Topics, split_thread_key
from threadline.transient import CONNECT_BACKOFF, retrying

if TYPE_CHECKING:
    from threadline.ops.server import OpsServer

log = get_logger(__name__)

SHUTDOWN_GRACE_S = 10.0
"""How long a stopping service lets its in-flight records finish (then they are handed back)."""
SHUTDOWN_SLACK_S = 3.0
"""What the rest of a stop (commit, leave the group, flush, close) may take after the grace: a
broker that is away cannot make a stop hang (B15; docs/decisions.md, decision 29)."""
BEFORE_DRAIN_S = 1.0
"""What the parts stopped before the drain (sweepers, listeners, the worker's continuation) may
take, out of the grace."""
EXIT_MARGIN_S = 2.0
"""After grace and slack, the process exits within this margin whatever still runs: a handler
that blocks the event loop, a user-code thread that never returns (the stop watchdog)."""


_left_behind: list[str] = []
"""Shutdown steps a bounded stop left behind (the broker away): the process then exits without
waiting for the event loop's own clean-up (its tasks and executor threads may wait on Kafka)."""


async def _bounded(what: str, aw: Any, deadline: float) -> None:
    """Run ``aw`` until the loop time ``deadline`` at the latest; a step that does not finish is
    cancelled and left behind without waiting for it (``asyncio.wait_for`` would wait for the
    cancellation, which aiokafka's stop may ignore), a step that fails is logged."""
    remaining = max(0.1, deadline - asyncio.get_running_loop().time())
    task = asyncio.ensure_future(aw)
    done, _ = await asyncio.wait({task}, timeout=remaining)
    if not done:
        _left_behind.append(what)
        task.cancel()
        log.warning("shutdown step did not finish in time; left behind", step=what, timeout_s=round(remaining, 2))
        return
    if task.cancelled():
        _left_behind.append(what)
        log.warning("shutdown step was cancelled", step=what)
    elif task.exception() is not None:
        log.warning("shutdown step failed", step=what, error=repr(task.exception()))


async def _undo(stops: list[Callable[[], object]], deadline: float) -> None:
    """Call the registered ``stops`` (plain or coroutine functions), last registered first, and
    empty the list; each is bounded by the loop time ``deadline`` (:func:`_bounded`: one that
    hangs is left behind, one that raises is logged, and the rest still run)."""
    while stops:
        stop = stops.pop()
        await _bounded(getattr(stop, "__qualname__", repr(stop)), _call(stop), deadline)


async def _call(stop: Callable[[], object]) -> None:
    result = stop()
    if inspect.isawaitable(result):
        await result


async def _until_connected(what: str, connect: Any) -> None:
    """Call ``connect()`` until it succeeds: a broker that is away at start-up is waited for
    (:data:`~threadline.transient.CONNECT_BACKOFF`, logged), not a reason to exit. Other errors
    are raised."""

    def logged(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        retry_in_s = state.next_action.sleep if state.next_action is not None else None
        log.warning("kafka unreachable at start-up; retrying", step=what, error=repr(error), retry_in_s=retry_in_s)

    async for attempt in retrying(CONNECT_BACKOFF, before_sleep=logged):
        with attempt:
            await connect()


class Service:
    """Base of the four services. Subclasses set ``name`` and implement :meth:`topics_in` and
    :meth:`handle`; :meth:`on_invalid` may answer bad input. What a subclass starts in
    :meth:`setup` it registers with :meth:`on_stop`, so :meth:`stop` undoes exactly what was
    started, also after a start that failed before or during ``setup``."""

    name = "service"

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or get_settings()
        self.topics = Topics.of(self.settings)
        self.db = Database(self.settings.pg_dsn, statement_cache=self.settings.pg_statement_cache,
                           transaction_pooling=self.settings.pg_transaction_pooling, max_size=self.pool_max(),
                           acquire_timeout_s=self.settings.pg_pool_timeout_s)
        self.payloads = PayloadStore(db=self.db)
        self.kafka_security = client_kwargs(self.settings)  # TLS / SASL, the same for every Kafka client
        self.producer = Producer(self.settings.kafka_bootstrap, client_id=f"{self.name}-{self.settings.instance_id}",
                                 linger_ms=self.settings.kafka_linger_ms, max_record_bytes=self.settings.max_record_bytes,
                                 spill=lambda body, topic: self.payloads.put(body, topic=topic),
                                 security=self.kafka_security)
        # the idle-topic sweep off (chunk_topic_idle_s 0): no registry rows, topics cached for good
        self.admin = TopicAdmin(self.settings.kafka_bootstrap, security=self.kafka_security,
                                replication_factor=self.settings.replication_factor,
                                registry=ChunkTopicRegistry(self.db) if self.settings.chunk_topic_idle_s > 0 else None,
                                trust_s=chunk_topic_trust_s(self.settings), on_taken=self.producer.learn_topics)
        self.outbox = Outbox(self.db, self.producer, ack_timeout_s=self.settings.kafka_ack_timeout_s,
                             before_relay=self._ensure_relayed_chunk_topics)
        self.relay = OutboxRelay(self.outbox)
        self.dead_letters = DeadLetters(self.producer, self.topics.dead_letters, self.name)
        self.consumer: KeyedConsumer | None = None
        self.migrated = False
        self.ops: OpsServer | None = None
        self._stops_before_drain: list[Callable[[], object]] = []
        self._stops_after_close: list[Callable[[], object]] = []

    def on_stop(self, stop: Callable[[], object], *, before_drain: bool = False) -> None:
        """Register ``stop`` (a plain or coroutine function of no arguments) to undo a part
        :meth:`setup` starts; register it as soon as the part exists, before starting it.

        :meth:`stop` calls the registered functions last registered first: those marked
        ``before_drain`` before the in-flight records are drained, the others once the shared
        resources are closed. A part never registered (its ``setup`` line not reached) is not
        stopped, so a stop never probes for attributes that ``setup`` did not create.
        """
        (self._stops_before_drain if before_drain else self._stops_after_close).append(stop)

    async def _ensure_relayed_chunk_topics(self, rows: list[tuple[str, str | None]]) -> None:
        """The outbox relay is about to publish ``(topic, key)`` rows: take their chunk topics
        (created again when the idle-topic sweep deleted them)."""
        head = f"{self.topics.prefix}.chunks."
        # together: the admin takes concurrent calls' topics in one batch
        await asyncio.gather(*(self.admin.ensure_chunk_topic(topic, retention_ms=self.settings.chunk_retention_ms,
                                                             thread=split_thread_key(key))
                               for topic, key in dict.fromkeys(rows) if topic.startswith(head) and key))

    def pool_max(self) -> int:
        """Connections of this service's PostgreSQL pool (``pg_pool_max``)."""
        return self.settings.pg_pool_max

    def topics_in(self) -> list[str]:
        raise NotImplementedError

    async def handle(self, record: Record) -> None:
        raise NotImplementedError

    async def on_invalid(self, record: Record, exc: InvalidEventError) -> None:
        """Answer an event that failed validation (default: nothing beyond the dead letter)."""

    async def setup(self) -> None:
        """Service-specific start-up (after the shared resources are up)."""

    async def start(self) -> None:
        """Migrate, connect, create topics, start the relay and the consumer."""
        structlog.contextvars.bind_contextvars(instance=self.settings.instance_id)
        if tracing.configure(self.name):
            log.info("tracing on", service=self.name)
        await self._serve_ops()
        applied = await asyncio.to_thread(migrate, self.settings.pg_session_dsn)
        self.migrated = True
        if applied:
            log.info("migrations applied", ids=applied)
        await self.db.start()
        await _until_connected("producer", self.producer.start)
        await _until_connected("admin", self.admin.start)
        await _until_connected("topics", lambda: self.admin.ensure(sorted({*self.topics.internal(), *self.topics_in()}),
                                                                   partitions=self.settings.partitions))
        # the shared layout's chunk topic (refused when its partition count is not chunk_partitions)
        await _until_connected("chunk topic", lambda: ensure_shared_chunks(
            self.admin, self.topics, partitions=self.settings.chunk_partitions,
            retention_ms=self.settings.chunk_retention_ms))
        # the group's first assignment is made from the metadata its members see then: a topic
        # just created and not yet in it would be assigned to nobody until the next metadata
        # refresh, minutes later (an ingress that answered nothing for 70 s in `make bench`)
        if unled := await self.admin.wait_leaders(self.topics_in()):
            log.warning("topics without a leader after their creation; consuming anyway", topics=unled)
        await self.setup()
        await self.relay.start()
        self.consumer = KeyedConsumer(
            bootstrap=self.settings.kafka_bootstrap, topics=self.topics_in(),
            group_id=self.topics.group(self.name.replace("_", "-")) + (
                f"-{self.settings.ingress_topic}" if self.settings.ingress_topic else ""),
            client_id=f"{self.name}-{self.settings.instance_id}",
            handler=guarded(self.handle, self.dead_letters, on_invalid=self.on_invalid, payloads=self.payloads,
                            retry_for_s=self.settings.transient_retry_s),
            max_in_flight=self.settings.max_in_flight, commit_interval_s=self.settings.commit_interval_s,
            max_poll_interval_ms=self.settings.kafka_max_poll_interval_ms,
            fetch_max_wait_ms=self.settings.kafka_fetch_max_wait_ms, security=self.kafka_security)
        await _until_connected("consumer", self.consumer.start)
        log.info("service started", service=self.name, topics=self.topics_in(),
                 statement_cache=self.settings.pg_use_statement_cache,
                 pg_mode="transaction-pooling" if self.settings.pg_transaction_pooling else "session")

    async def stop(self) -> None:
        """Drain in-flight records (up to :data:`SHUTDOWN_GRACE_S` from the call), then close
        everything within :data:`SHUTDOWN_SLACK_S` more, even when the broker is away (what cannot
        be flushed or committed then is redelivered / re-published from the outbox later). The
        parts registered with :meth:`on_stop` are stopped before the drain (within
        :data:`BEFORE_DRAIN_S`) or after the close, as registered. Every step has its deadline, so
        the whole returns within grace + slack + 0.5 s even when every handler and part waits on
        a lock that is never released (a step that hangs is left behind; decision 182)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + SHUTDOWN_GRACE_S + SHUTDOWN_SLACK_S  # every step below is bounded by it
        await _undo(self._stops_before_drain, started + BEFORE_DRAIN_S)
        if self.consumer is not None:  # the grace counts from the stop's start, not from the drain's
            grace_s = max(0.0, started + SHUTDOWN_GRACE_S - loop.time())
            await _bounded("consumer", self.consumer.stop(grace_s=grace_s), deadline - 2.0)
        await _bounded("outbox relay", self.relay.stop(), deadline - 1.5)
        await _bounded("topic admin", self.admin.stop(), deadline - 1.2)
        await _bounded("producer", self.producer.stop(), deadline - 0.5)
        await _bounded("database", self.db.stop(), deadline)
        await _bounded("traces", asyncio.to_thread(tracing.shutdown), deadline + 0.5)
        if self.ops is not None:
            await _bounded("metrics endpoint", self.ops.stop(), deadline + 0.5)
        await _undo(self._stops_after_close, deadline + 0.5)
        log.info("service stopped", service=self.name, took_s=round(loop.time() - started, 2))

    async def _serve_ops(self) -> None:
        """``/metrics``, ``/healthz`` and ``/readyz`` on ``metrics_port`` (when set), from the
        start on: a service that waits for its broker answers "alive, not ready"."""
        if self.settings.metrics_port is None:
            return
        from threadline.ops.metrics import REGISTRY, ServiceCollector
        from threadline.ops.server import OpsServer

        REGISTRY.register(ServiceCollector(self.name, lambda: self.consumer, self.db))

        async def kafka() -> bool:
            return self.consumer is not None and self.consumer.joined

        async def postgres() -> bool:
            return await self.db.ping()

        async def migrations() -> bool:
            return self.migrated

        self.ops = OpsServer({"kafka": kafka, "postgres": postgres, "migrations": migrations},
                             port=self.settings.metrics_port)
        await self.ops.start()


def _start_watchdog(after_s: float) -> None:
    """Exit the process ``after_s`` seconds from now if it is still running: a thread of its own,
    so that it fires even while the event loop is blocked (a plain handler that never returns)
    or the interpreter waits at exit for a user-code thread."""

    def fire() -> None:
        log.warning("stop outlived its bound; exiting now", bound_s=after_s, user_threads_busy=usercode.busy())
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    timer = threading.Timer(after_s, fire)
    timer.daemon = True
    timer.start()


async def serve(service: Service, *, watchdog: bool = True) -> None:
    """Start ``service`` and run it until SIGTERM or SIGINT, then stop it (drain, hand back,
    close; the process exits within the bound of decision 44 whatever still runs).

    A signal that arrives while the service is still starting (waiting for its broker) cancels
    the start and stops what was started. The consumption is :class:`KeyedConsumer` (one
    partition's records of different threads run concurrently, offsets committed only when
    finished); FastStream describes the wire (:mod:`threadline.contract`) but runs no broker
    here: its application shell requires one, which would only open an idle producer.

    ``watchdog=False`` (tests that serve in-process) leaves out the timer that ends the process.
    """
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    starting = asyncio.create_task(service.start(), name="service-start")
    signalled = asyncio.create_task(stopping.wait(), name="service-signal")
    await asyncio.wait({starting, signalled}, return_when=asyncio.FIRST_COMPLETED)
    try:
        if starting.done():
            starting.result()  # a start that failed raises here (after the stop below)
            gc_tuning.freeze_start_up()
            await signalled
        else:
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
            log.info("stopped while starting", service=service.name)
    finally:  # the process exits within the bound even if the stop below cannot finish
        if watchdog:
            _start_watchdog(SHUTDOWN_GRACE_S + SHUTDOWN_SLACK_S + EXIT_MARGIN_S)
        signalled.cancel()
        await service.stop()


def run(service_cls: type[Service]) -> None:
    """Entry point of ``python -m threadline.services.<name>``."""
    settings = get_settings()
    configure(level=settings.log_level, json=settings.log_json, service=service_cls.name)
    gc_tuning.set_young_threshold(settings.gc_young_threshold)
    asyncio.run(_main(service_cls(settings)))


async def _main(service: Service) -> None:
    """Serve the service; once it stopped, leftover tasks get 1 s to end after their cancellation; when
    some did not, or a bounded stop left a step behind (a broker that is away), the process exits
    at once (decision 29)."""
    await serve(service)
    leftovers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in leftovers:
        task.cancel()
    pending: set[asyncio.Task[Any]] = set()
    if leftovers:
        _, pending = await asyncio.wait(leftovers, timeout=1.0)
    if pending or _left_behind or usercode.busy():
        log.warning("exiting without the event loop's clean-up", tasks=len(pending), left_behind=_left_behind,
                    user_threads_busy=usercode.busy())
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
