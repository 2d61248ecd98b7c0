"""The seam between :class:`~threadline.client.ThreadlineClient` and a cluster: a transport.

The client implements every verb once (build the ingress request, make the send result, wrap a
woken run's output); a transport only moves things, in three ways:

- **request → replies**: send one ingress request, get a future per reply the client waits for
  (``accepted``, ``persisted``, ``result``, ``notified``, ``aborted``);
- **subscribe → chunks**: follow a thread's chunk stream (a :class:`Subscription`);
- **read → rows**: one read of the read model (threads, messages, runs, the active run, agents,
  scores, the inbox) by name (:data:`ReadName`).

Three transports ship: :class:`~threadline.client.kafka_transport.KafkaTransport` (the broker,
reads through a :class:`Reader`), :class:`~threadline.client.http_transport.HttpTransport` (the
gateway), and :class:`~threadline.client.memory_transport.MemoryTransport` (in process, for
users' unit tests). Any object with these methods is a transport.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args

from threadline.events.base import Event
from threadline.events.chunk_types import ChunkBody

ReadName = Literal["active_run", "agent", "thread", "threads", "messages", "runs", "scores", "inbox",
                   "notification", "mark"]
"""What :meth:`Transport.read` answers, with its keyword parameters and its answer:

- ``active_run`` (resource_id, thread_id) → the lease holder's run id or ``None``;
- ``agent`` (agent_id) → ``{id, name, description, metadata, dynamic_metadata, memory, voice}`` or ``None``;
- ``thread`` (resource_id, thread_id) → ``{id, resource_id, title, metadata, created_at, updated_at}`` or ``None``;
- ``threads`` (resource_id, limit) → ``[{id, title, metadata, created_at, updated_at}]``, latest first;
- ``messages`` (resource_id, thread_id) → ``[{id, run_id, role, type, content, created_at}]``, oldest first;
- ``runs`` (resource_id, thread_id) → ``[{run_id, agent_id, kind, status, …}]``, oldest first;
- ``scores`` (run_id) → ``[{run_id, scorer, status, score, reason, error, scored_at}]``;
- ``inbox`` (resource_id, thread_id, status) → the thread's records without payload, oldest first;
- ``notification`` (resource_id, thread_id, record_id) → one record with its payload, or ``None``;
- ``mark`` (resource_id, thread_id, record_id, status) → the record marked, or ``None``.

A thread of another resource reads as one that does not exist (``None`` / ``[]``)."""

READS = frozenset(get_args(ReadName))


def query_of(reader: object, name: str) -> Callable[..., Awaitable[object]]:
    """A reader's method for read ``name``: its ``_<name>``.

    Raises:
        ValueError: ``name`` is no read (:data:`ReadName`) or the reader has no method for it.
    """
    query: Callable[..., Awaitable[object]] | None = getattr(reader, f"_{name}", None) if name in READS else None
    if query is None:
        raise ValueError(f"no read {name!r}")
    return query


Replies = dict[str, "asyncio.Future[Any]"]
"""Slot name → the future of its reply (an ``ErrorReply`` answers any slot)."""


@dataclass(frozen=True, slots=True)
class Sent:
    """What :meth:`Transport.request` returns: the request id and a future per slot it fills.

    A transport may fill fewer slots than asked (over HTTP, ``generate`` answers ``result``
    only; ``persisted`` comes only when the message was persisted); a slot's future may be done
    already (an HTTP answer)."""

    request_id: str
    replies: Replies


@dataclass(frozen=True, slots=True, kw_only=True)
class Follow:
    """Where a subscription starts and what it leaves out (:meth:`ThreadlineClient.subscribe_to_thread`)."""

    from_beginning: bool = False
    from_offset: int | None = None
    from_time_ms: int | None = None
    after: Mapping[str, int] | None = None
    hide_signals: bool | list[str] = False
    on_abort: Callable[[], Awaitable[bool]] | None = field(default=None, compare=False)
    on_active: Callable[[], Awaitable[str | None]] | None = field(default=None, compare=False)


class Subscription(Protocol):
    """A thread's chunks (Mastra's ``subscribeToThread`` result): ``stream`` of chunk dicts
    without duplicates or dead attempts, ``cursor()``, ``seen_run_id()``, ``await
    active_run_id()``, ``await abort()``, ``await unsubscribe()``."""

    @property
    def topic(self) -> str | None:
        """The thread's stream (a chunk topic's name; ``None`` while unknown)."""
        ...

    @property
    def start_offset(self) -> int | None:
        """Where the subscription started (fixed once ``subscribe`` returned)."""
        ...

    @property
    def last_offset(self) -> int | None:
        """The offset of the last chunk read."""
        ...

    @property
    def partition(self) -> int | None:
        """The partition of the shared chunk topic the offsets are of (shared chunk layout);
        ``None`` for a thread's own topic (per-thread layout) or while unknown."""
        ...

    @property
    def stream(self) -> AsyncIterator[ChunkBody]: ...
    def cursor(self) -> dict[str, int]: ...
    def seen_run_id(self) -> str | None: ...
    async def active_run_id(self) -> str | None: ...
    async def abort(self) -> bool: ...
    async def unsubscribe(self) -> None: ...


class Reader(Protocol):
    """The read side alone: :meth:`read` as :meth:`Transport.read`, plus its lifecycle."""

    async def read(self, name: ReadName, /, **params: object) -> Any:
        """The answer of read ``name`` (:data:`ReadName`)."""
        ...

    async def close(self) -> None:
        """Release what the reader holds (idempotent)."""
        ...


class Transport(Protocol):
    """What a :class:`~threadline.client.ThreadlineClient` needs of a cluster.

    Attributes:
        reply_timeout_s: how long the client waits for an ``accepted`` / ``notified`` /
            ``aborted`` reply (seconds).
        agents_module: the module whose objects call-level options may name by reference
            (``None``: options are sent as given; the far end encodes them).
    """

    @property
    def reply_timeout_s(self) -> float: ...
    @property
    def agents_module(self) -> str | None: ...

    async def start(self) -> None:
        """Connect. Raises :class:`~threadline.client.results.BrokerUnavailableError` when the
        cluster cannot be reached."""
        ...

    async def stop(self) -> None:
        """Disconnect (idempotent)."""
        ...

    async def request(self, request: Event, expect: Mapping[str, tuple[str, ...]], *,
                      wait_s: float | None = None) -> Sent:
        """Send one ingress request; ``expect`` maps each slot to the reply types that fill it
        (``{"accepted": ("accepted", "skipped")}``); ``wait_s``: how long the caller will wait
        for a ``result``.

        Raises:
            BrokerUnavailableError: the request was not acknowledged in time.
            RequestFailed: refused at once (an answer that came with the request).
        """
        ...

    async def subscribe(self, resource_id: str, thread_id: str, follow: Follow) -> Subscription:
        """Follow the thread's chunks from the position ``follow`` names, fixed when this returns."""
        ...

    async def read(self, name: ReadName, /, **params: object) -> Any:
        """The answer of read ``name`` (:data:`ReadName`)."""
        ...
