"""Topic administration: the fixed topics at start, per-thread chunk topics on demand."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from threadline.logging import get_logger

log = get_logger(__name__)


class TopicAdmin:
    """Creates topics once per process (a cache avoids asking the broker again).

    ``replication_factor`` (``Settings.replication_factor``, ``THREADLINE_REPLICATION_FACTOR``)
    is given to every topic it creates; it must not exceed the number of brokers. ``security``:
    the TLS / SASL arguments of :func:`threadline.kafka.security.client_kwargs`.
    """

    def __init__(self, bootstrap: str, *, replication_factor: int = 1,
                 security: Mapping[str, Any] | None = None) -> None:
        if replication_factor < 1:
            raise ValueError(f"replication_factor must be >= 1, got {replication_factor}")
        self._bootstrap = bootstrap
        self._security = dict(security or {})
        self.replication_factor = replication_factor
        self._client: AIOKafkaAdminClient | None = None
        self._known: set[str] = set()
        self._lock = asyncio.Lock()
        self._pending: dict[str, asyncio.Task[None]] = {}

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
                     config: dict[str, str] | None = None) -> None:
        """Create the topics that do not exist yet (idempotent, safe under races), each with
        ``partitions`` partitions and the admin's replication factor. Raises ``RuntimeError``
        when the broker refuses one (e.g. a replication factor above the broker count)."""
        missing = [t for t in topics if t not in self._known]
        if not missing:
            return
        assert self._client is not None, "TopicAdmin not started"
        new = [NewTopic(name=t, num_partitions=partitions, replication_factor=self.replication_factor,
                        topic_configs=config or {}) for t in missing]
        try:
            result = await self._client.create_topics(new)
            for name, code, *_ in getattr(result, "topic_errors", []) or []:
                if code == 38:  # INVALID_REPLICATION_FACTOR: more replicas than brokers
                    raise RuntimeError(f"creating topic {name} failed: replication factor {self.replication_factor} "
                                       "exceeds the brokers available (THREADLINE_REPLICATION_FACTOR)")
                if code not in (0, 36):  # 36 = TOPIC_ALREADY_EXISTS
                    raise RuntimeError(f"creating topic {name} failed with error code {code}")
        except TopicAlreadyExistsError:
            pass
        self._known.update(missing)
        log.debug("topics ensured", topics=missing)

    async def ensure_one(self, topic: str, *, config: dict[str, str] | None = None) -> None:
        """Create one single-partition topic, sharing the request among concurrent callers."""
        if topic in self._known:
            return
        task = self._pending.get(topic)
        if task is None:
            task = asyncio.ensure_future(self.ensure([topic], partitions=1, config=config))
            self._pending[topic] = task
            task.add_done_callback(lambda _t: self._pending.pop(topic, None))
        await asyncio.shield(task)
        # the broker needs a moment before a brand-new topic has a leader
        await self._wait_leader(topic)

    async def ensure_chunk_topic(self, topic: str, *, retention_ms: int) -> None:
        """Create a per-thread chunk topic (one partition, ``retention.ms`` = ``retention_ms``,
        ``Settings.chunk_retention_ms``) unless it exists."""
        await self.ensure_one(topic, config={"retention.ms": str(retention_ms)})

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

    async def _wait_leader(self, topic: str) -> None:
        assert self._client is not None
        for _ in range(50):
            try:
                meta = await self._client.describe_topics([topic])
                parts = meta[0].get("partitions") if meta else None
                if parts and all(p.get("leader", -1) >= 0 for p in parts):
                    return
            except Exception:  # noqa: BLE001 - metadata may lag right after creation
                pass
            await asyncio.sleep(0.05)
