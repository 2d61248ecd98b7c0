"""The envelope every event shares: id, type, schema version, thread, run, time, trace headers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from threadline.ids import new_id

SCHEMA_VERSION = 1
"""The schema version this code writes. Events with a higher version are rejected."""

SCHEMA_VERSIONS: dict[int, str] = {
    1: "initial: ingress requests, replies, run commands, step tasks and results, lifecycle, "
       "chunks, dead letters",
}


def utcnow() -> datetime:
    """Timezone-aware now (UTC)."""
    return datetime.now(UTC)


class Event(BaseModel):
    """Fields every event carries (the versioned envelope).

    Subclasses add a ``type`` literal (the discriminator) and their own fields at top level.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    event_id: str = Field(default_factory=new_id)
    """Unique id; consumers drop an event id they already handled."""
    schema_version: int = SCHEMA_VERSION
    """Version of the event's schema (see ``SCHEMA_VERSIONS``)."""
    time: datetime = Field(default_factory=utcnow)
    """When the event was created (UTC)."""
    trace: dict[str, str] = Field(default_factory=dict)
    """Trace context headers (W3C ``traceparent``/``tracestate``), passed along unchanged."""

    def dump(self) -> dict[str, Any]:
        """JSON-ready dict (``None`` fields left out)."""
        return self.model_dump(mode="json", exclude_none=True)
