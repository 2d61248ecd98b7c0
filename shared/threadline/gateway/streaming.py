"""A thread's chunks as Server-Sent Events, resumable by ``Last-Event-ID``.

Each chunk is one event: ``data`` the chunk's JSON, ``id`` :func:`event_id` =
``<offset>:<seq>:<runId>`` (the chunk's position in the thread's chunk topic, then its run and
``seq`` there). The chunks pass the Python client's filter
(:meth:`threadline.client.subscription.ThreadSubscription.accept`): duplicates ``(runId, seq)``
and the chunks of attempts declared dead are left out.

A resumed stream reads the topic again from its start and sends only what lies after the given
offset: the filter then knows every run's last ``seq`` and every dead attempt, exactly as the
connection that dropped knew them, so the resumed stream continues it without a duplicate, a
gap, or a zombie chunk of a dead attempt (decision 52).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import orjson

from threadline.client.transport import Subscription
from threadline.events.chunk_types import ChunkBody

RETRY_MS = 1000
"""The reconnection delay a browser's ``EventSource`` is told to use."""


@dataclass(frozen=True)
class Position:
    """Where a resumed stream goes on: after topic ``offset`` (the chunk ``run_id``/``seq`` there)."""

    offset: int
    seq: int | None = None
    run_id: str | None = None


def event_id(offset: int, chunk: ChunkBody) -> str:
    """``<offset>:<seq>:<runId>`` of a chunk read at ``offset``."""
    return f"{offset}:{chunk.get('seq')}:{chunk.get('runId')}"


def parse_event_id(value: str | None) -> Position | None:
    """The :class:`Position` of an event id; ``None`` for none. Raises ``ValueError`` for an
    id this gateway did not give (a negative or non-numeric offset)."""
    if value is None or not value.strip():
        return None
    offset, _, rest = value.strip().partition(":")
    seq, _, run_id = rest.partition(":")
    if not offset.isdigit():
        raise ValueError("Last-Event-ID must be an id this stream gave (<offset>:<seq>:<runId>)")
    return Position(int(offset), int(seq) if seq.lstrip("-").isdigit() else None, run_id or None)


async def events(sub: Subscription, *, resume: Position | None) -> AsyncIterator[dict[str, str | int]]:
    """The SSE events of ``sub`` (started; from the topic's beginning when ``resume`` is set):
    first ``subscribed`` (data ``{offset}``: every chunk from this topic offset on will come),
    then one event per chunk the filter accepts and that lies after ``resume``. Unsubscribes
    when the consumer stops iterating (the browser went away)."""
    try:
        yield {"event": "subscribed", "retry": RETRY_MS,
               "data": orjson.dumps({"offset": sub.start_offset, "topic": sub.topic}).decode()}
        async for chunk in sub.stream:
            offset = sub.last_offset
            if offset is None or (resume is not None and offset <= resume.offset):
                continue  # re-read to rebuild the filter's state: sent before the reconnection
            yield {"id": event_id(offset, chunk), "data": orjson.dumps(chunk).decode()}
    finally:
        await sub.unsubscribe()
