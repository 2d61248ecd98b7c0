"""A transport in this process, for unit tests of code that uses a client: no broker, no
gateway, no database. It records every request, answers each with a reply you may script, plays
the chunks you emit to a thread's subscribers, and answers reads from rows you set::

    from threadline.client import MemoryTransport, ThreadlineClient
    from threadline.events import RunResult

    memory = MemoryTransport()
    memory.answer("generate", lambda req: {"result": RunResult(request_id=req.event_id, run_id="run-1",
                                                               text="hello", finish_reason="stop")})
    memory.rows["thread"] = {"id": "t-1", "resource_id": "u-1", "title": "Hi", "metadata": {}}
    async with ThreadlineClient(transport=memory) as tl:
        assert (await tl.generate("hi", agent_id="a", resource_id="u-1", thread_id="t-1")).text == "hello"
    assert memory.requests[0].type == "generate"

By default a send is ``accepted`` as a ``wake`` of a new run (whose chunks are what you
:meth:`~MemoryTransport.emit`), ``generate`` answers an empty ``stop`` result, a notification
is ``notified`` with no results, and ``abort`` aborts nothing. It checks no agent ids and keeps
no thread state: it is a stand-in for a cluster's answers, not a cluster.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from threadline.client.http_subscription import resolved
from threadline.client.subscription import ThreadSubscription
from threadline.client.transport import Follow, ReadName, Sent
from threadline.events.base import Event
from threadline.events.chunk_types import ChunkBody, parse_chunk
from threadline.events.replies import Aborted, Accepted, Notified, Reply, RunResult
from threadline.ids import new_id

Responder = Callable[[Event], Mapping[str, "Reply | asyncio.Future[Reply]"]]
"""A request → its replies by slot (``{"accepted": Accepted(...), "result": RunResult(...)}``)."""


def _default(request: Event) -> dict[str, Reply]:
    """The replies a cluster with an idle thread would give (see the module)."""
    kind, rid = getattr(request, "type", ""), request.event_id
    if kind == "abort":
        return {"aborted": Aborted(request_id=rid, aborted=False)}
    if kind == "send_notification_signal":
        return {"notified": Notified(request_id=rid, results=[])}
    run_id = new_id("run")
    accepted = Accepted(request_id=rid, action="wake", run_id=run_id, signal_id=getattr(request, "signal_id", None))
    if kind == "generate":
        return {"accepted": accepted, "result": RunResult(request_id=rid, run_id=run_id, finish_reason="stop")}
    return {"accepted": accepted}


def _future(answer: Reply | asyncio.Future[Reply]) -> asyncio.Future[Reply]:
    """``answer`` as the future of a slot: itself when it is one, else one already done."""
    return answer if isinstance(answer, asyncio.Future) else resolved(answer)


class MemoryTransport:
    """A scripted cluster in memory (see the module).

    Attributes:
        requests: every request sent, in order (the typed ingress events).
        rows: read name → its answer, or a function of the read's keyword parameters
            (``rows["messages"] = lambda resource_id, thread_id: [...]``); unset reads answer
            ``None`` (one item) or ``[]`` (a listing).
        reply_timeout_s: how long the client waits for a reply that never comes.
    """

    agents_module: str | None = None

    def __init__(self, *, reply_timeout_s: float = 5.0) -> None:
        self.reply_timeout_s = reply_timeout_s
        self.requests: list[Event] = []
        self.rows: dict[str, object] = {}
        self._responders: dict[str, Responder] = {}
        self._threads: dict[tuple[str, str], _Log] = {}
        self.started = False

    async def start(self) -> None:
        """Nothing to connect."""
        self.started = True

    async def stop(self) -> None:
        """Nothing to close; open subscriptions end."""
        self.started = False
        for log in self._threads.values():
            log.close()

    def answer(self, request_type: str, responder: Responder) -> None:
        """Answer requests of ``request_type`` (``send_message``, ``generate``, …) with
        ``responder(request)``: a mapping slot → reply (or an ``asyncio.Future`` of it) that
        replaces the default reply of each slot it names (see the module)."""
        self._responders[request_type] = responder

    def emit(self, resource_id: str, thread_id: str, *chunks: Mapping[str, object]) -> None:
        """Append chunks (dicts with ``type``, ``runId``, ``seq``, …) to the thread's stream."""
        self._log(resource_id, thread_id).append(chunks)

    def _log(self, resource_id: str, thread_id: str) -> _Log:
        return self._threads.setdefault((resource_id, thread_id), _Log(f"memory.{resource_id}.{thread_id}"))

    async def request(self, request: Event, expect: Mapping[str, tuple[str, ...]], *,
                      wait_s: float | None = None) -> Sent:
        """Record the request; the responder's replies, over the defaults, fill the slots the
        client expects (a reply given as an ``asyncio.Future`` is that future: one never done
        makes the client time out after ``reply_timeout_s``)."""
        self.requests.append(request)
        responder = self._responders.get(str(getattr(request, "type", "")))
        answers = {**_default(request), **(responder(request) if responder is not None else {})}
        return Sent(request.event_id, {slot: _future(answers[slot]) for slot in expect if slot in answers})

    async def subscribe(self, resource_id: str, thread_id: str, follow: Follow) -> MemorySubscription:
        """A subscription on the thread's emitted chunks, from the position ``follow`` names."""
        log = self._log(resource_id, thread_id)
        return MemorySubscription(log, log.start(follow), follow)

    async def read(self, name: ReadName, /, **params: object) -> Any:
        """``rows[name]`` (called with the parameters when it is a function)."""
        if name not in self.rows:
            return [] if name in ("threads", "messages", "runs", "scores", "inbox") else None
        row = self.rows[name]
        return row(**params) if callable(row) else row


class _Log:
    """One thread's chunks with the time each was emitted; ``wake`` is set (and replaced) on each change."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.chunks: list[tuple[int, dict[str, object]]] = []
        self.closed = False
        self.wake = asyncio.Event()

    def append(self, chunks: tuple[Mapping[str, object], ...]) -> None:
        now_ms = int(time.time() * 1000)
        self.chunks.extend((now_ms, dict(c)) for c in chunks)
        self.changed()

    def close(self) -> None:
        self.closed = True
        self.changed()

    def changed(self) -> None:
        """Wake every reader waiting on the current ``wake``."""
        self.wake.set()
        self.wake = asyncio.Event()

    def start(self, follow: Follow) -> int:
        """The index the subscription starts at."""
        if follow.from_offset is not None:
            return follow.from_offset
        if follow.from_time_ms is not None:
            return next((i for i, (at, _) in enumerate(self.chunks) if at >= follow.from_time_ms), len(self.chunks))
        return 0 if follow.from_beginning else len(self.chunks)


class MemorySubscription:
    """Chunks of one thread of a :class:`MemoryTransport`, with the interface and the filter of
    :class:`~threadline.client.ThreadSubscription` (duplicates by ``(runId, seq)``, dead
    attempts and what ``after`` names left out; ``hide_signals``)."""

    def __init__(self, log: _Log, start: int, follow: Follow) -> None:
        self._log = log
        self._filter = ThreadSubscription("memory", log.topic, on_abort=follow.on_abort, on_active=follow.on_active,
                                          after=dict(follow.after) if follow.after is not None else None,
                                          hide_signals=follow.hide_signals)
        self._closed = False
        self.topic: str | None = log.topic
        self.start_offset: int | None = start
        self.last_offset: int | None = None
        self.partition: int | None = None  # a thread's own log, as a per-thread topic

    @property
    def stream(self) -> AsyncIterator[ChunkBody]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ChunkBody]:
        at = self.start_offset or 0
        while not self._closed:
            while at < len(self._log.chunks) and not self._closed:
                chunk, self.last_offset = parse_chunk(self._log.chunks[at][1]), at
                at += 1
                if self._filter.accept(chunk) and not self._filter._hidden(chunk):
                    yield chunk
            if self._log.closed or self._closed:
                return
            await self._log.wake.wait()

    def cursor(self) -> dict[str, int]:
        """Highest ``seq`` delivered per run."""
        return self._filter.cursor()

    def seen_run_id(self) -> str | None:
        """The run whose last delivered chunk was not its ``finish``."""
        return self._filter.seen_run_id()

    async def active_run_id(self) -> str | None:
        """The client's ``active_run_id`` (the ``active_run`` read), unless this subscription
        delivered that run's ``finish``."""
        return await self._filter.active_run_id()

    async def abort(self) -> bool:
        """The client's ``abort`` of the thread."""
        return await self._filter.abort()

    async def unsubscribe(self) -> None:
        """Stop reading (a reader waiting for chunks ends)."""
        self._closed = True
        self._log.changed()
