"""Where a thread's chunks are: a topic, a partition, and the key that tells its records apart.

Two layouts (``Settings.chunk_layout``; docs/decisions.md#shared-chunk-layout):

- ``per-thread``: the thread's own topic (:meth:`~threadline.topics.Topics.thread_chunks`),
  partition 0; every record in it is the thread's, so a reader keeps all (``key`` ``None``).
- ``shared``: :attr:`~threadline.topics.Topics.shared_chunks`, the partition Kafka's default
  partitioner gives the thread key (:func:`chunk_partition`: murmur2 of the key, sign bit
  cleared, modulo the partition count). A writer that names the partition (the chunk writer) and
  one that leaves it to the producer (the outbox relay, a plain Kafka client keying by thread)
  land on the same partition, so a thread's chunks keep their order; a reader keeps only the
  records whose key is the thread key.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka.partitioner import murmur2

from threadline.errors import ConfigurationError
from threadline.kafka.admin import TopicAdmin, chunk_topic_config
from threadline.topics import Topics, thread_key


def chunk_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives a record keyed ``key`` on a topic of
    ``partitions`` partitions (Java's ``Utils.toPositive(murmur2(key)) % partitions``, which
    aiokafka's ``DefaultPartitioner`` computes alike). Raises ``ValueError`` for ``partitions`` < 1."""
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, not {partitions}")
    hashed: int = murmur2(key)
    return (hashed & 0x7FFFFFFF) % partitions


@dataclass(frozen=True, slots=True)
class ChunkPlace:
    """Where one thread's chunks are.

    Attributes:
        topic: the topic; ``partition``: its partition holding the thread;
        key: the thread key as bytes, every chunk record's key;
        shared: the topic holds other threads too (a reader keeps only records keyed ``key``).
    """

    topic: str
    partition: int
    key: bytes
    shared: bool

    @property
    def only_key(self) -> bytes | None:
        """The key a reader keeps (``None``: every record of the partition is the thread's)."""
        return self.key if self.shared else None


def chunk_place(topics: Topics, partitions: int, resource_id: str, thread_id: str) -> ChunkPlace:
    """Where the chunks of ``(resource_id, thread_id)`` are, ``partitions`` being the shared
    topic's partition count (``Settings.chunk_partitions``; unused in the per-thread layout)."""
    key = thread_key(resource_id, thread_id).encode()
    if not topics.shared_layout:
        return ChunkPlace(topics.thread_chunks(resource_id, thread_id), 0, key, False)
    return ChunkPlace(topics.shared_chunks, chunk_partition(key, partitions), key, True)


async def ensure_shared_chunks(admin: TopicAdmin, topics: Topics, *, partitions: int, retention_ms: int) -> None:
    """In the shared layout, make the shared chunk topic unless it exists (``partitions``
    partitions, :func:`~threadline.kafka.admin.chunk_topic_config`) and check its partition count;
    nothing in the per-thread layout. Call it at start, before any chunk is written or read.

    Raises:
        ConfigurationError: the topic exists with another partition count than ``partitions``
            (``THREADLINE_CHUNK_PARTITIONS``): a thread's partition would differ between processes.
        RuntimeError: the broker refused to create it (as :meth:`TopicAdmin.ensure`).
    """
    if not topics.shared_layout:
        return
    topic = topics.shared_chunks
    await admin.ensure([topic], partitions=partitions, config=chunk_topic_config(retention_ms))
    await admin.wait_leaders([topic])
    found = await admin.partition_count(topic)
    if found != partitions:
        raise ConfigurationError(
            f"the shared chunk topic {topic} has {found} partitions, THREADLINE_CHUNK_PARTITIONS says {partitions}: "
            "every process of a cluster must use the topic's count (a thread's partition depends on it)")
