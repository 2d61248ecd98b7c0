"""``ES``: a Server-Sent Events reader that behaves as a browser's ``EventSource`` (the WHATWG
HTML standard, "Server-sent events"; docs/testing.md).

It keeps the last event id it received (none until an event carries one), reconnects to the
*same URL* after the ``retry`` the server advertised (default 3000 ms), sends ``Last-Event-ID``
only when it holds an id, and stops for good when an answer is not 200 or not
``text/event-stream`` (``fatal`` holds that status). Comments (``:``) are dropped, as a browser
does. Every event is recorded with the time it arrived (``time.monotonic()``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

DEFAULT_RETRY_MS = 3000


def field_of(line: str) -> tuple[str, str]:
    """``(name, value)`` of one SSE line (not blank, not a comment): one space after the colon
    is dropped, as the standard says."""
    name, _, value = line.partition(":")
    return name, value[1:] if value.startswith(" ") else value


@dataclass(frozen=True)
class SseEvent:
    """One dispatched event: ``type`` (``message`` unless named), ``data`` (text), the
    ``last_event_id`` in force when it was dispatched, the ``connection`` (1, 2, …) it came on,
    and ``at`` (monotonic s)."""

    type: str
    data: str
    last_event_id: str
    connection: int
    at: float

    def json(self) -> Any:
        return orjson.loads(self.data)


@dataclass
class EventSource:
    """An ``EventSource`` on ``url`` over ``http`` (headers such as a key come from the client;
    a browser would put a token in the URL). Start it with :meth:`start`, stop with :meth:`close`."""

    http: httpx.AsyncClient
    url: str
    events: list[SseEvent] = field(default_factory=list)
    last_event_id: str = ""
    retry_ms: int = DEFAULT_RETRY_MS
    connections: int = 0
    sent_ids: list[str | None] = field(default_factory=list)
    """The ``Last-Event-ID`` each connection sent (``None``: none)."""
    fatal: int | None = None
    """The status of the answer that ended it (not 200, or not an event stream)."""
    _task: asyncio.Task[None] | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def start(self) -> EventSource:
        self._task = asyncio.create_task(self._run(), name="event-source")
        return self

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @property
    def done(self) -> bool:
        return self._task is not None and self._task.done()

    async def wait_for(self, predicate: Any, timeout_s: float) -> None:
        """Wait until ``predicate(self)`` is true.

        Raises:
            AssertionError: it ended (``fatal``) first, or ``timeout_s`` passed (the message says
                what it saw: connections, ids sent, the last events).
        """
        try:
            async with asyncio.timeout(timeout_s):
                while not predicate(self):
                    self._changed.clear()
                    if self.done:
                        raise AssertionError(f"the EventSource ended (status {self.fatal})")
                    await self._changed.wait()
        except TimeoutError:
            tail = [(e.connection, e.type, e.last_event_id) for e in self.events[-5:]]
            raise AssertionError(f"not seen in {timeout_s:g} s: {self.connections} connections, "
                                 f"ids sent {self.sent_ids}, last events {tail}") from None

    async def _run(self) -> None:
        while True:
            self.connections += 1
            headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
            if self.last_event_id:
                headers["Last-Event-ID"] = self.last_event_id
            self.sent_ids.append(headers.get("Last-Event-ID"))
            with contextlib.suppress(httpx.TransportError):
                async with self.http.stream("GET", self.url, headers=headers, timeout=None) as resp:
                    kind = resp.headers.get("content-type", "").split(";")[0].strip()
                    if resp.status_code != 200 or kind != "text/event-stream":
                        self.fatal = resp.status_code
                        self._changed.set()
                        return
                    await self._read(resp)
            self._changed.set()
            await asyncio.sleep(self.retry_ms / 1000)

    async def _read(self, resp: httpx.Response) -> None:
        kind, id_buffer = "", self.last_event_id
        data: list[str] = []
        async for line in resp.aiter_lines():
            if line == "":
                self.last_event_id = id_buffer
                if data:
                    self.events.append(SseEvent(kind or "message", "\n".join(data), self.last_event_id,
                                                self.connections, time.monotonic()))
                    self._changed.set()
                kind, data = "", []
                continue
            if line.startswith(":"):
                continue
            name, value = field_of(line)
            if name == "event":
                kind = value
            elif name == "data":
                data.append(value)
            elif name == "id" and "\0" not in value:
                id_buffer = value
            elif name == "retry" and value.isdigit():
                self.retry_ms = int(value)
