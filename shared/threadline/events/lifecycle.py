"""Public lifecycle events (keyed by thread): runs, steps, threads, signals."""

from __future__ import annotations

from typing import Any, Literal

from threadline.events.base import Event

LifecycleType = Literal[
    "run_started", "step_finished", "run_finished", "run_failed", "run_aborted", "run_tripwire",
    "thread_active", "thread_idle", "signal_accepted", "notification_delivered", "summary_delivered",
    "score",
]


class LifecycleEvent(Event):
    """One lifecycle event. Every run ends with exactly one terminal event
    (``run_finished``, ``run_failed``, ``run_aborted`` or ``run_tripwire``)."""

    type: LifecycleType
    resource_id: str
    thread_id: str
    run_id: str | None = None
    agent_id: str | None = None
    step: int | None = None
    finish_reason: str | None = None
    error: dict[str, Any] | None = None
    tripwire: dict[str, Any] | None = None
    notification_ids: list[str] | None = None
    """``notification_delivered`` / ``summary_delivered``: the inbox records concerned."""
    signal_id: str | None = None
    score: dict[str, Any] | None = None
    """``score``: one scorer's result of a finished run, ``{scorer, score, reason}`` (``score``
    ``None`` and ``error`` set when the scorer failed; decision 71)."""
