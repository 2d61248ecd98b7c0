"""Topic administration: the fixed topics at start, per-thread chunk topics on demand.

Chunk topics of idle threads are deleted by the idle-topic sweep (docs/decisions.md 40-42), so a
cached "this chunk topic exists" is trusted only for a while: with a registry (services) for
``trust_s`` after the registry row was last taken, without one (the client) not at all.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError
from aiokafka.protocol.metadata import MetadataRequest

from threadline._internal.coalesce import Coalescer
from threadline.logging import get_logger

log = get_logger(__name__)


class TopicRegistry(Protocol):
    """Where the producers of a process take chunk topics before they create or write them (the
    store's :class:`~threadline.store.chunk_topics.ChunkTopicRegistry`; a Protocol, so Kafka's
    room does not import the store's)."""

    async def use(self, topic: str, resource_id: str, thread_id: str) -> Literal["inserted", "live"]:
        """``"inserted"`` when the caller must create ``topic``, ``"live"`` when it exists; waits
        while it is being deleted."""
        ...

    async def use_many(self, rows: list[tuple[str, str, str]]) -> list[str]:
        """Take many ``(topic, resource_id, thread_id)`` at once: the topics live or new."""
        ...


CHUNK_INDEX_INTERVAL_BYTES = 1024 * 1024
"""A chunk topic's ``index.interval.bytes`` (Kafka's default: 4096; decision 89). The broker
writes an offset- and a time-index entry each time this many bytes were appended since the last;
the first entry of a segment touches its freshly mapped, sparse index files, which on this
machine's ext4 held the produce request that crossed it for 25-170 ms (the broker's own
``localTimeMs``): once per thread, about its first tool step. At 1 MiB most threads never write an
entry; a consumer seeking into a topic reads at most 1 MiB past the nearest one."""


LEADER_POLL_S = (0.002, 0.004, 0.008, 0.016, 0.032) + (0.05,) * 49
"""Seconds between the metadata requests that wait for a new topic's leader (2.5 s in all;
decision 90): a single broker has the leader a few milliseconds after ``CreateTopics`` answers,
and a fixed 50 ms made every brand-new thread's topic take 50 ms or more."""


def replication_config(replication_factor: int) -> dict[str, str]:
    """The replication settings every topic gets besides its replication factor (decision 205):
    from 3 replicas on, ``min.insync.replicas`` is a majority of them (2 of 3, 3 of 5), so an
    acknowledged (``acks=all``) record is on a majority and survives any minority of brokers
    lost, whatever the cluster's own default (often 1 on a managed Kafka). Below 3 replicas:
    nothing, the broker's default (a single broker; with 2, a majority of 2 would stop every
    write while one broker is away)."""
    if replication_factor < 3:
        return {}
    return {"min.insync.replicas": str(replication_factor // 2 + 1)}


def chunk_topic_config(retention_ms: int) -> dict[str, str]:
    """The topic configuration of a per-thread chunk topic: ``retention.ms`` = ``retention_ms``
    (``Settings.chunk_retention_ms``) and ``index.interval.bytes`` =
    :data:`CHUNK_INDEX_INTERVAL_BYTES`."""
    return {"retention.ms": str(retention_ms), "index.interval.bytes": str(CHUNK_INDEX_INTERVAL_BYTES)}


@dataclass(frozen=True)
class _Take:
    """One :meth:`TopicAdmin.ensure_chunk_topic` call waiting for its batch."""

    topic: str
    resource_id: str
    thread_id: str
    retention_ms: int


class TopicAdmin:
    """Creates topics once per process (a cache avoids asking the broker again).

    Args:
        bootstrap: Kafka bootstrap servers.
        replication_factor: given to every topic it creates (``THREADLINE_REPLICATION_FACTOR``);
            it must not exceed the number of brokers. From 3 on, each topic also gets
            ``min.insync.replicas`` = a majority (:func:`replication_config`).
        security: the TLS / SASL arguments of :func:`threadline.kafka.security.client_kwargs`.
        registry: the chunk-topic registry (services): :meth:`ensure_chunk_topic` with a
            ``thread`` takes the topic's row before it trusts or creates the topic.
        trust_s: seconds a chunk topic taken through the registry is trusted without taking its
            row again (must stay well below the sweep's idle time; the service uses a quarter).
        recheck: without a registry, ask the broker about a chunk topic on every
            :meth:`ensure_chunk_topic` instead of caching it (the client: the topic may have been
            deleted since); ``False`` caches it for the process's life (idle-topic sweep off).
        on_taken: called with the chunk topics of each batch taken through the registry, once
            they have leaders (the service's producer starts fetching their metadata).
    """

    def __init__(self, bootstrap: str, *, replication_factor: int = 1, security: Mapping[str, object] | None = None,
                 registry: TopicRegistry | None = None, trust_s: float = 60.0, recheck: bool = False,
                 on_taken: Callable[[list[str]], None] | None = None) -> None:
        if replication_factor < 1:
            raise ValueError(f"replication_factor must be >= 1, got {replication_factor}")
        self._bootstrap = bootstrap
        self._security = dict(security or {})
        self.replication_factor = replication_factor
        self._client: AIOKafkaAdminClient | None = None
        self._known: set[str] = set()
        self.registry = registry
        self.trust_s = trust_s
        self.recheck = recheck
        self.on_taken = on_taken
        self._taken: dict[str, float] = {}  # chunk topic -> loop time its registry row was last taken
        self._pending: dict[str, asyncio.Future[set[str]]] = {}
        self._takes: Coalescer[_Take] = Coalescer(self._take_batch)

    async def start(self) -> None:
        if self._client is None:
            client = AIOKafkaAdminClient(bootstrap_servers=self._bootstrap, **self._security)
            try:
                await client.start()
            except BaseException:
                with contextlib.suppress(Exception):  # the broker is away: nothing kept, start() again later
                    await client.close()
                raise
            self._client = client

    async def stop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    async def ensure(self, topics: list[str], *, partitions: int = 1,
                     config: dict[str, str] | None = None) -> set[str]:
        """Create the topics that do not exist yet (idempotent, safe under races), each with
        ``partitions`` partitions, the admin's replication factor and :func:`replication_config`
        (``config`` wins where both name a setting).

        Returns:
            The names this request created (the broker answered "created", not "exists"):
            each was empty when made, so every record in it came after this call began.
        Raises:
            RuntimeError: the broker refused one (e.g. a replication factor above the broker count).
        """
        missing = [t for t in topics if t not in self._known]
        if not missing:
            return set()
        assert self._client is not None, "TopicAdmin not started"
        topic_configs = {**replication_config(self.replication_factor), **(config or {})}
        new = [NewTopic(name=t, num_partitions=partitions, replication_factor=self.replication_factor,
                        topic_configs=topic_configs) for t in missing]
        created: set[str] = set()
        try:
            result = await self._client.create_topics(new)
            for name, code, *_ in getattr(result, "topic_errors", []) or []:
                if code == 38:  # INVALID_REPLICATION_FACTOR: more replicas than brokers
                    raise RuntimeError(f"creating topic {name} failed: replication factor {self.replication_factor} "
                                       "exceeds the brokers available (THREADLINE_REPLICATION_FACTOR)")
                if code not in (0, 36):  # 36 = TOPIC_ALREADY_EXISTS
                    raise RuntimeError(f"creating topic {name} failed with error code {code}")
                if code == 0:
                    created.add(name)
        except TopicAlreadyExistsError:
            pass
        self._known.update(missing)
        log.debug("topics ensured", topics=missing)
        return created

    async def ensure_one(self, topic: str, *, config: dict[str, str] | None = None) -> bool:
        """Create one single-partition topic, sharing the request among concurrent callers;
        returns once it has a leader. Returns whether the request this call waited for created
        it (then it is new: every record in it came after this call began); ``False`` when it
        existed or was known."""
        if topic in self._known:
            return False
        task = self._pending.get(topic)
        if task is None:
            task = asyncio.ensure_future(self.ensure([topic], partitions=1, config=config))
            self._pending[topic] = task
            task.add_done_callback(lambda _t: self._pending.pop(topic, None))
        created = topic in await asyncio.shield(task)
        # the broker needs a moment before a brand-new topic has a leader
        await self.wait_leaders([topic])
        return created

    async def ensure_chunk_topic(self, topic: str, *, retention_ms: int,
                                 thread: tuple[str, str] | None = None) -> bool:
        """Create a per-thread chunk topic (one partition, :func:`chunk_topic_config`) unless it
        exists; call it before producing to it.

        With a registry and ``thread`` = ``(resource_id, thread_id)``: the topic's registry row
        is taken (``used_at`` now; waiting while the idle-topic sweep deletes it) at most every
        ``trust_s``, and the broker asked then (the topic is created when missing). Without a registry
        and with ``recheck`` (the client) the broker is asked every time: the topic may have
        been deleted since.

        Returns:
            Without a registry: whether this call's request created the topic (:meth:`ensure_one`;
            a subscriber then starts at its offset 0 without asking for its end). With one:
            ``False``.
        Raises:
            TopicBeingDeletedError: the topic stayed ``deleting`` too long (transient).
        """
        config = chunk_topic_config(retention_ms)
        if self.registry is None or thread is None:
            if self.recheck:
                self._known.discard(topic)
            return await self.ensure_one(topic, config=config)
        now = asyncio.get_running_loop().time()
        if topic in self._known and now - self._taken.get(topic, float("-inf")) < self.trust_s:
            return False
        await self._takes.submit(_Take(topic, thread[0], thread[1], retention_ms))
        return False

    async def _take_batch(self, takes: list[_Take]) -> dict[_Take, BaseException]:
        """Take a batch of chunk topics (concurrent :meth:`ensure_chunk_topic` calls, coalesced):
        one registry statement for all, one ``CreateTopics`` request per retention, and one
        metadata request per round until every topic has a leader. A topic whose row is being
        deleted is taken on its own (:meth:`TopicRegistry.use` waits for the deletion)."""
        by_topic = {t.topic: t for t in takes}
        errors = await self._use_rows(list(by_topic.values()))
        ready = [t for t in by_topic.values() if t not in errors]
        # ask the broker once per take: the topic may have been deleted and re-created since, or
        # its row inserted by a process that died before creating it (a cached "exists" would
        # then make every step wait on metadata that never comes). First whether it is there with
        # a leader (a subscriber usually made it): one metadata request, no CreateTopics (decision 101)
        self._known.difference_update(t.topic for t in ready)
        there = await self._led([t.topic for t in ready])
        if self.on_taken is not None and there:
            self.on_taken(sorted(there))
        missing = [t for t in ready if t.topic not in there]
        await self._create_chunk_topics(missing)
        self._known.update(there)
        now = asyncio.get_running_loop().time()
        for t in ready:
            self._taken[t.topic] = now
        if self.on_taken is not None and missing:
            self.on_taken([t.topic for t in missing])
        return {t: errors[by_topic[t.topic]] for t in takes if by_topic[t.topic] in errors}

    async def _use_rows(self, takes: list[_Take]) -> dict[_Take, BaseException]:
        """Take the registry rows of ``takes`` (one topic each): one statement for all, then
        :meth:`TopicRegistry.use` for each row that statement left (being deleted). Returns the
        takes that failed, with their errors."""
        assert self.registry is not None
        live = set(await self.registry.use_many([(t.topic, t.resource_id, t.thread_id) for t in takes]))
        waiting = [t for t in takes if t.topic not in live]
        outcomes = await asyncio.gather(*(self.registry.use(t.topic, t.resource_id, t.thread_id) for t in waiting),
                                        return_exceptions=True)
        return {take: outcome for take, outcome in zip(waiting, outcomes, strict=True)
                if isinstance(outcome, BaseException)}

    async def _create_chunk_topics(self, missing: list[_Take]) -> None:
        """Create ``missing`` (one ``CreateTopics`` request per retention) and wait for their leaders."""
        for retention, topics in _by_retention(missing).items():
            await self.ensure(topics, partitions=1, config=chunk_topic_config(retention))
        await self.wait_leaders([t.topic for t in missing])

    async def _led(self, topics: list[str]) -> set[str]:
        """Those of ``topics`` the broker has, with a leader for every partition: one metadata
        request that never creates a topic (``allow_auto_topic_creation`` false: a broker with
        ``auto.create.topics.enable`` would otherwise make a missing one with its own defaults,
        not :func:`chunk_topic_config`). Any failure counts as "none there"."""
        assert self._client is not None, "TopicAdmin not started"
        if not topics:
            return set()
        try:
            # aiokafka's admin has no public metadata call that leaves auto-creation off
            response = await self._client._send_request(MetadataRequest(topics, allow_auto_topic_creation=False))
            return _with_leaders(response.to_object()["topics"])
        except Exception:  # noqa: BLE001 - CreateTopics and the leader wait decide then
            return set()

    def forget(self, topics: list[str]) -> None:
        """Drop ``topics`` from the caches (they were deleted)."""
        for topic in topics:
            self._known.discard(topic)
            self._taken.pop(topic, None)

    async def delete_and_wait(self, topics: list[str], *, timeout_s: float = 30.0) -> list[str]:
        """Delete ``topics`` and wait until the broker no longer knows them; returns those gone
        (a name unknown from the start counts as gone). Raises ``TimeoutError`` after ``timeout_s``."""
        assert self._client is not None, "TopicAdmin not started"
        self.forget(topics)
        with contextlib.suppress(Exception):  # unknown names: the wait below decides
            await self._client.delete_topics(topics)
        async with asyncio.timeout(timeout_s):
            while True:
                meta = await self._client.describe_topics(topics)
                left = [m["topic"] for m in meta if m.get("error_code", 0) != 3]  # 3 = UNKNOWN_TOPIC_OR_PARTITION
                if not left:
                    return topics
                await asyncio.sleep(0.1)

    async def exists(self, topic: str) -> bool:
        """Whether the broker has ``topic`` (positive answers are cached; topics are never deleted
        under a running service). Used to refuse a ``reply_to`` naming a topic that does not
        exist: a record for it could never be acknowledged."""
        if topic in self._known:
            return True
        assert self._client is not None, "TopicAdmin not started"
        meta = await self._client.describe_topics([topic])
        found = bool(meta) and meta[0].get("error_code", 0) == 0 and bool(meta[0].get("partitions"))
        if found:
            self._known.add(topic)
        return found

    async def partition_count(self, topic: str) -> int:
        """How many partitions the broker has for ``topic`` (0: it does not know the topic)."""
        assert self._client is not None, "TopicAdmin not started"
        meta = await self._client.describe_topics([topic])
        return len(meta[0].get("partitions") or []) if meta and meta[0].get("error_code", 0) == 0 else 0

    async def wait_leaders(self, topics: list[str]) -> list[str]:
        """Wait (at most ~2.5 s) until every one of ``topics`` has a leader for each partition,
        one metadata request per round for those still without; the rounds are
        :data:`LEADER_POLL_S` apart. Returns those still without one (``[]``: all led)."""
        assert self._client is not None
        left = list(dict.fromkeys(topics))
        for delay in LEADER_POLL_S:
            if not left:
                return left
            try:
                led = _with_leaders(await self._client.describe_topics(left))
                left = [t for t in left if t not in led]
                if not left:
                    return left
            except Exception:  # noqa: BLE001 - metadata may lag right after creation
                pass
            await asyncio.sleep(delay)
        return left


def _with_leaders(meta: list[dict[str, Any]] | None) -> set[str]:
    """The topics of a metadata answer (``describe_topics``' form) that exist with a leader for
    every partition."""
    return {m["topic"] for m in meta or [] if m.get("error_code", 0) == 0 and m.get("partitions")
            and all(p.get("leader", -1) >= 0 for p in m["partitions"])}


def _by_retention(takes: list[_Take]) -> dict[int, list[str]]:
    """The topics of ``takes`` by their retention (ms), shortest first, each list in take order."""
    grouped: dict[int, list[str]] = {}
    for take in sorted(takes, key=lambda t: t.retention_ms):
        grouped.setdefault(take.retention_ms, []).append(take.topic)
    return grouped
