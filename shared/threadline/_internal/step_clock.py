"""Readings of a step's start that code below the worker takes (the ``step start`` budget,
:mod:`threadline.worker.step_gap`, decision 84).

The worker puts a dict in :data:`POINTS` for a step begun from its step task; the model call and
the chunk writer, which run inside that step's task, add their points with :func:`mark`. Any other
code path (a continued step, a client, a test) has no dict there and :func:`mark` does nothing.
"""

from __future__ import annotations

import time
from contextvars import ContextVar

POINTS: ContextVar[dict[str, float] | None] = ContextVar("threadline_step_points", default=None)
"""The current step's readings, point name → ``time.perf_counter()`` seconds; ``None`` when no
step start is being timed."""


def mark(name: str) -> None:
    """Record ``time.perf_counter()`` as point ``name`` of the current step, the first time only
    (a second model call or text chunk of the step keeps the first reading)."""
    points = POINTS.get()
    if points is not None and name not in points:
        points[name] = time.perf_counter()
