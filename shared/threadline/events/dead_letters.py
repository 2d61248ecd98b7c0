"""Dead-letter records: an event that could not be handled, kept whole with the reason."""

from __future__ import annotations

from typing import Literal

from threadline.events.base import Event


class DeadLetter(Event):
    """What was received (``raw``, as text or base64) and why it was not handled."""

    type: Literal["dead_letter"] = "dead_letter"
    service: str
    source_topic: str
    partition: int
    offset: int
    key: str | None = None
    code: str
    reason: str
    raw: str
    raw_encoding: Literal["utf-8", "base64"] = "utf-8"
    request_id: str | None = None
