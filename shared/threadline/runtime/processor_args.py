"""Two arguments every processor method gets besides its own, as Mastra passes them:
``abort_signal`` (Mastra's ``abortSignal``: is the run being aborted?) and ``tracing_context``
(Mastra's ``tracingContext``: the span the call runs under, for attributes of one's own)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from threadline.logging import get_logger
from threadline.ops import tracing

if TYPE_CHECKING:
    from opentelemetry.trace import Span

log = get_logger(__name__)


class AbortSignal:
    """The run's abort, seen from inside a step (Mastra's ``abortSignal``).

    ``aborted`` turns True, and the listeners are called, when the run is aborted while its step
    runs on this worker — just before the step's task is cancelled, so a processor awaiting
    something of its own (a moderation call) can stop it. A listener that raises is logged and
    skipped."""

    __slots__ = ("_event", "_listeners", "reason")

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._listeners: list[Callable[[], Any]] = []
        self.reason: str | None = None
        """Why the run was aborted (``None`` while it is not)."""

    @property
    def aborted(self) -> bool:
        """True once the run was aborted."""
        return self._event.is_set()

    def add_listener(self, listener: Callable[[], Any]) -> None:
        """Call ``listener()`` (no arguments) when the run is aborted; at once if it already was."""
        if self.aborted:
            self._call(listener)
        else:
            self._listeners.append(listener)

    async def wait(self) -> None:
        """Return once the run is aborted."""
        await self._event.wait()

    def abort(self, reason: str = "aborted") -> None:
        """Mark the run aborted and call the listeners once (a second call does nothing)."""
        if self.aborted:
            return
        self.reason = reason
        self._event.set()
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            self._call(listener)

    @staticmethod
    def _call(listener: Callable[[], Any]) -> None:
        try:
            listener()
        except Exception:
            log.warning("an abort listener raised", exc_info=True)


@dataclass(frozen=True, slots=True)
class TracingContext:
    """Mastra's ``tracingContext``: ``current_span`` is the OpenTelemetry span the processor runs
    under (the step's), or ``None`` when tracing is off (docs/operations.md)."""

    current_span: Span | None = None


_OFF = TracingContext()


def tracing_context() -> TracingContext:
    """The tracing context of a processor call made now."""
    span = tracing.current_span()
    return _OFF if span is None else TracingContext(span)
