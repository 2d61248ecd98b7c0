"""``subscribe_to_thread`` over the gateway's Server-Sent Events (``GET …/events``, read with
httpx-sse): the interface of :class:`threadline.client.ThreadSubscription` (``stream``,
``cursor()``, ``seen_run_id()``, ``await active_run_id()``, ``await abort()``,
``await unsubscribe()``) without a Kafka connection.

The gateway already leaves out duplicates and dead attempts (decision 52); this end keeps
``after`` (chunks already seen), ``hide_signals``, and reconnects a dropped connection with
``Last-Event-ID`` (the gateway resumes after it without a duplicate or a gap).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import httpx
import orjson
from httpx_sse import EventSource, ServerSentEvent

from threadline.client.active import Delivered, hidden_echo
from threadline.errors import ThreadlineError
from threadline.events.chunk_types import ChunkBody, ChunkParseError, parse_chunk
from threadline.logging import get_logger

log = get_logger(__name__)

WAIT_FOR_THREAD_S = 0.2
"""How often a subscription to a thread that does not exist yet asks again."""
RECONNECTS = 20
"""Consecutive failed reconnections after which the stream raises."""


_T = TypeVar("_T")


def resolved(value: _T) -> asyncio.Future[_T]:
    """A future that already holds ``value`` (the HTTP answer came with the request)."""
    fut: asyncio.Future[_T] = asyncio.get_running_loop().create_future()
    fut.set_result(value)
    return fut


class SubscriptionRefused(ThreadlineError):  # noqa: N818 - what happened: the gateway refused it
    """The gateway refused the stream (``status`` 401, 403 or 422)."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"the gateway refused the stream: {status} {body[:200]}")
        self.status = status


class HttpThreadSubscription:
    """Chunks of one thread over SSE.

    Attributes:
        stream: async iterator of chunk dicts, in topic order, without duplicates, dead attempts,
            or the chunks ``after`` names.
        topic: the thread's chunk topic (from the ``subscribed`` event; ``None`` while the
            thread does not exist yet).
        start_offset: the topic offset the subscription started at (0 for a thread that did not exist).
        last_offset: the offset of the last chunk read.
        partition: the shared chunk topic's partition those offsets are of (a gateway in the
            shared chunk layout says it); ``None`` for a thread's own topic.
    """

    def __init__(self, http: httpx.AsyncClient, path: str, *, from_beginning: bool = False,
                 from_offset: int | None = None, from_time_ms: int | None = None,
                 after: dict[str, int] | None = None, hide_signals: bool | list[str] = False,
                 on_abort: Callable[[], Awaitable[bool]] | None = None,
                 on_active: Callable[[], Awaitable[str | None]] | None = None) -> None:
        self._http = http
        self._path = path
        self._from_beginning = from_beginning
        self._from_offset = from_offset
        self._from_time_ms = from_time_ms
        self._delivered = Delivered(after)
        self._hide = hide_signals
        self._on_abort = on_abort
        self._on_active = on_active
        self._response: httpx.Response | None = None
        self._events: AsyncIterator[ServerSentEvent] | None = None
        self._last_id: str | None = None
        self._closed = False
        self.topic: str | None = None
        self.start_offset: int | None = None
        self.last_offset: int | None = None
        self.partition: int | None = None

    def _params(self) -> tuple[dict[str, str], dict[str, str]]:
        """Query and headers of the first connection."""
        if self._from_offset is not None and self._from_offset > 0:
            return {}, {"Last-Event-ID": str(self._from_offset - 1)}
        if self._from_offset == 0 or self._from_beginning:
            return {"from": "beginning"}, {}
        if self._from_time_ms is not None:
            return {"from_time_ms": str(self._from_time_ms)}, {}
        return {"from": "end"}, {}

    async def _connect(self, params: dict[str, str], headers: dict[str, str]) -> bool:
        """Open the SSE response and read its ``subscribed`` event; False on 404 (no such thread yet).

        Raises:
            SubscriptionRefused: another refusal.
        """
        request = self._http.build_request("GET", self._path, params=params, timeout=httpx.Timeout(30, read=None),
                                           headers={**headers, "Accept": "text/event-stream", "Cache-Control": "no-store"})
        resp = await self._http.send(request, stream=True)
        if resp.status_code != 200:
            body = (await resp.aread()).decode(errors="replace")
            await resp.aclose()
            if resp.status_code == 404:
                return False
            raise SubscriptionRefused(resp.status_code, body)
        events = EventSource(resp).aiter_sse()
        async for ev in events:
            if ev.event == "subscribed":
                data = orjson.loads(ev.data)
                self.topic = data.get("topic")
                self.partition = data.get("partition")
                if self.start_offset is None:
                    self.start_offset = data.get("offset")
                break
        self._response, self._events = resp, events
        return True

    async def start(self) -> None:
        """Connect; the position is fixed when this returns (as the Kafka subscription's)."""
        params, headers = self._params()
        if not await self._connect(params, headers):
            self.start_offset = 0  # no thread yet: everything on it will be new, read from its first chunk

    def cursor(self) -> dict[str, int]:
        """Highest ``seq`` delivered per run (pass back as ``after=``)."""
        return dict(self._delivered.seen)

    def seen_run_id(self) -> str | None:
        """The run streaming as far as this subscriber has seen (its last chunk was not ``finish``)."""
        return self._delivered.streaming

    async def active_run_id(self) -> str | None:
        """The thread's active run, asked of the gateway (the thread's lease); ``None`` too when
        that run's ``finish`` was already delivered by this subscription (as
        :meth:`ThreadSubscription.active_run_id`)."""
        if self._on_active is None:
            raise RuntimeError("this subscription was not made by a client")
        return self._delivered.active(await self._on_active())

    async def abort(self) -> bool:
        """Abort the thread's active run; True if one was running."""
        if self._on_abort is None:
            raise RuntimeError("this subscription was not made by a client")
        return await self._on_abort()

    async def unsubscribe(self) -> None:
        """Stop reading (the runs go on)."""
        self._closed = True
        await self._close()

    async def _close(self) -> None:
        resp, self._response, self._events = self._response, None, None
        if resp is not None:  # an iteration still reading it ends with a StreamError, taken as the end
            with contextlib.suppress(Exception):
                await resp.aclose()

    @property
    def stream(self) -> AsyncIterator[ChunkBody]:
        return self._iterate()

    async def _reconnect(self) -> None:
        """Open the stream again: after the last event read, or, before any, as first asked (from
        the beginning when the thread did not exist at the start)."""
        failures = 0
        while not self._closed:
            if self._last_id is not None:
                params, headers = {}, {"Last-Event-ID": self._last_id}
            elif self.topic is None:  # the thread did not exist: all of it is new
                params, headers = {"from": "beginning"}, {}
            else:
                params, headers = ({"from": "beginning"}, {}) if self.start_offset == 0 else \
                    ({}, {"Last-Event-ID": str((self.start_offset or 1) - 1)})
            try:
                if await self._connect(params, headers):
                    return
                await asyncio.sleep(WAIT_FOR_THREAD_S)
            except (httpx.TransportError, httpx.RemoteProtocolError):
                failures += 1
                if failures > RECONNECTS:
                    raise
                await asyncio.sleep(min(2.0, 0.1 * failures))

    async def _iterate(self) -> AsyncIterator[ChunkBody]:
        while not self._closed:
            if self._events is None:
                await self._reconnect()
                if self._events is None:
                    return
            try:
                async for ev in self._events:
                    if ev.event not in ("", "message") or not ev.data:
                        continue
                    self._last_id = ev.id or self._last_id
                    if ev.id:
                        with contextlib.suppress(ValueError):  # "<offset>:…", shared layout "<partition>/<offset>:…"
                            self.last_offset = int(ev.id.partition(":")[0].rpartition("/")[2])
                    try:
                        chunk = parse_chunk(ev.data)
                    except ChunkParseError:
                        continue
                    if self.accept(chunk) and not self._hidden(chunk):
                        yield chunk
            except (httpx.TransportError, httpx.StreamError) as exc:
                if self._closed:
                    return
                log.info("stream connection dropped; resuming", path=self._path, error=type(exc).__name__)
            await self._close()

    def accept(self, chunk: ChunkBody) -> bool:
        """Duplicate filter for one chunk (as :meth:`ThreadSubscription.accept`; the gateway's
        stream already left out dead attempts); True if it should be shown."""
        return self._delivered.take(chunk)

    def _hidden(self, chunk: ChunkBody) -> bool:
        """``hide_signals``: True hides every signal echo, a list hides those signal types."""
        return hidden_echo(chunk, self._hide)
