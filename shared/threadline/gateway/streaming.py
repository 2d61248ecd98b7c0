"""A thread's chunks as Server-Sent Events, resumable by ``Last-Event-ID``.

Each chunk is one event: ``data`` the chunk's JSON, ``id`` :func:`event_id` =
``<offset>:<seq>:<runId>`` (the chunk's position in the thread's chunk topic, then its run and
``seq`` there); in the shared chunk layout ``<partition>/<offset>:<seq>:<runId>``, the offset
being of that partition of the shared topic, so an id of one layout is never taken for a
position of the other (docs/decisions.md#shared-chunk-layout). The chunks pass the Python client's filter
(:meth:`threadline.client.subscription.ThreadSubscription.accept`): duplicates ``(runId, seq)``
and the chunks of attempts declared dead are left out.

A resumed stream reads the topic again from its start and sends only what lies after the given
offset: the filter then knows every run's last ``seq`` and every dead attempt, exactly as the
connection that dropped knew them, so the resumed stream continues it without a duplicate, a
gap, or a zombie chunk of a dead attempt (decision 52).

A stream's subscription is closed when its response is over, however it ended
(:class:`EventStream`, :class:`ClosingStreamingResponse`): not only by the body generator's
``finally``, which never runs when the browser left before the body started (decision 190).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import orjson
from sse_starlette import EventSourceResponse
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from threadline.client.transport import Subscription
from threadline.events.chunk_types import ChunkBody
from threadline.gateway.seam import after

RETRY_MS = 1000
"""The reconnection delay a browser's ``EventSource`` is told to use."""
CLOSE_BOUND_S = 5.0
"""How long (s) closing a served stream's subscription may take, shielded from cancellation."""

EXPIRED = {"code": "token_expired", "message": "the credential that opened this stream has expired: "
           "reconnect with a valid one (Last-Event-ID resumes without a gap)"}
"""The ``error`` event's data that ends a stream at its credential's expiry (decision 216)."""

Close = Callable[[], Awaitable[None]]
_T = TypeVar("_T")


@dataclass(frozen=True)
class Position:
    """Where a resumed stream goes on: after topic ``offset`` (the chunk ``run_id``/``seq`` there);
    ``partition``: the shared chunk topic's partition the offset is of (``None``: a thread's own
    topic, or an offset given bare)."""

    offset: int
    seq: int | None = None
    run_id: str | None = None
    partition: int | None = None


def event_id(offset: int, chunk: ChunkBody, partition: int | None = None) -> str:
    """``<offset>:<seq>:<runId>`` of a chunk read at ``offset``; ``<partition>/<offset>:…`` when
    read from a shared chunk topic's ``partition``."""
    at = str(offset) if partition is None else f"{partition}/{offset}"
    return f"{at}:{chunk.get('seq')}:{chunk.get('runId')}"


def start_id(start_offset: int | None, resume: Position | None, partition: int | None = None) -> str | None:
    """The id of a stream's ``subscribed`` event: a resume from it goes on where this stream
    starts — after ``resume`` when it resumes one, else at offset ``start_offset`` (the id is the
    offset before it, ``-1`` for the first) — so an ``EventSource`` cut off before the first chunk
    reconnects with a position and loses nothing (decision 214); ``<partition>/…`` when read from
    a shared chunk topic's ``partition``."""
    if resume is not None:
        offset: int | None = resume.offset
    else:
        offset = None if start_offset is None else start_offset - 1
    if offset is None:
        return None
    return str(offset) if partition is None else f"{partition}/{offset}"


def parse_event_id(value: str | None) -> Position | None:
    """The :class:`Position` of an event id; ``None`` for none. A bare ``<offset>`` is taken as
    an offset of the thread's stream in the gateway's layout (what a client builds from its
    offsets); a bare ``-1`` (or ``<partition>/-1``) is the position before a topic's (partition's)
    first chunk, a ``subscribed`` event's id (decision 214). Raises ``ValueError`` for an id this
    gateway did not give (a non-numeric or other negative offset, a non-numeric partition)."""
    if value is None or not value.strip():
        return None
    at, _, rest = value.strip().partition(":")
    seq, _, run_id = rest.partition(":")
    part, slash, offset = at.rpartition("/")
    before_first = offset == "-1" and not rest
    if (not offset.isdigit() and not before_first) or (slash and not part.isdigit()):
        raise ValueError("Last-Event-ID must be an id this stream gave (<offset>:<seq>:<runId>, "
                         "or <partition>/<offset>:<seq>:<runId>)")
    return Position(int(offset), int(seq) if seq.lstrip("-").isdigit() else None, run_id or None,
                    int(part) if slash else None)


def resumed_in(resume: Position | None, partition: int | None) -> Position | None:
    """``resume`` if it is a position of the stream read (on ``partition``: ``None`` for a
    thread's own topic), else ``None``: an id given in the other chunk layout, or of another
    partition, names no record of this stream, so the stream starts over from the thread's
    retained beginning (decision 202). A bare offset is taken as this stream's."""
    if resume is None or resume.partition is None or resume.partition == partition:
        return resume
    return None


async def events(sub: Subscription, *, resume: Position | None,
                 after_run: str | None = None) -> AsyncIterator[dict[str, str | int]]:
    """The SSE events of ``sub`` (started; from the topic's beginning when ``resume`` is set):
    first ``subscribed`` (data ``{offset, topic}``, and ``partition`` in the shared chunk layout:
    every chunk from this offset on will come; id :func:`start_id`, the resume point of a stream
    cut off before its first chunk), then one event per chunk the filter accepts and that lies
    after ``resume`` (:func:`resumed_in`; and, with ``after_run``, belongs to a run after that
    one: :mod:`threadline.gateway.seam`). Unsubscribes when the consumer stops iterating (the
    browser went away)."""
    try:
        partition = sub.partition
        resume = resumed_in(resume, partition)
        opened: dict[str, object] = {"offset": sub.start_offset, "topic": sub.topic}
        if partition is not None:
            opened["partition"] = partition
        opening: dict[str, str | int] = {"event": "subscribed", "retry": RETRY_MS,
                                         "data": orjson.dumps(opened).decode()}
        if (first := start_id(sub.start_offset, resume, partition)) is not None:
            opening["id"] = first
        yield opening
        async for chunk in sub.stream:
            offset = sub.last_offset
            if offset is None or (resume is not None and offset <= resume.offset):
                continue  # re-read to rebuild the filter's state: sent before the reconnection
            if after_run is not None and not after(chunk.get("runId"), after_run):
                continue  # a run GET …/messages answered with (decision 215)
            yield {"id": event_id(offset, chunk, partition), "data": orjson.dumps(chunk).decode()}
    finally:
        await sub.unsubscribe()


async def bounded(source: AsyncIterator[_T], expires_at: float | None, last: _T) -> AsyncIterator[_T]:
    """The items of ``source`` until ``expires_at`` (s since the epoch; ``None``: no end), then
    ``last`` and the end, whether an item was coming or not: nothing goes out on a stream after
    the credential that opened it expired (decision 216). ``source`` is closed however this ends."""
    it = aiter(source)
    try:
        while expires_at is None or (left := expires_at - time.time()) > 0:
            try:
                item = await (anext(it) if expires_at is None else asyncio.wait_for(anext(it), left))
            except StopAsyncIteration:
                return
            except TimeoutError:
                break
            yield item
        yield last
    finally:
        await it.aclose()  # type: ignore[attr-defined]  # an async generator


def until_expiry(source: AsyncIterator[dict[str, str | int]],
                 expires_at: float | None) -> AsyncIterator[dict[str, str | int]]:
    """:func:`bounded` for ``GET …/events``: the last event is ``event: error`` with :data:`EXPIRED`."""
    return bounded(source, expires_at, {"event": "error", "data": orjson.dumps(EXPIRED).decode()})


async def served(response: Awaitable[None], close: Close) -> None:
    """Await ``response`` (an ASGI response being served), then ``close`` however it ended
    (normally, an error, a cancellation), shielded and bounded by :data:`CLOSE_BOUND_S`."""
    try:
        await response
    finally:
        with anyio.move_on_after(CLOSE_BOUND_S, shield=True):
            await close()


class EventStream(EventSourceResponse):
    """An ``EventSourceResponse`` that awaits ``on_close`` once it is over, however it ended.

    A body generator's own ``finally`` is not enough: when the browser leaves before
    sse-starlette starts the body, or for a ``HEAD`` request (headers only), the generator never
    runs, so what the handler opened for it (a subscription, a fan-out stream counted against
    ``THREADLINE_GATEWAY_MAX_STREAMS``) would stay open for good (decision 190). ``on_close``
    must be idempotent (the generator may have closed it already)."""

    def __init__(self, content: AsyncIterator[Any], *, on_close: Close, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await served(super().__call__(scope, receive, send), self._on_close)


class ClosingStreamingResponse(StreamingResponse):
    """A ``StreamingResponse`` that awaits ``on_close`` once it is over, as :class:`EventStream`."""

    def __init__(self, content: AsyncIterator[Any], *, on_close: Close, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await served(super().__call__(scope, receive, send), self._on_close)
