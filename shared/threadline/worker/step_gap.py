"""The step overhead of a continued run, split where it goes (issue 13's latency budget).

Between a step's ``step-finish`` and the first chunk of the step the same worker continues the
run with, the worker passes these points (``time.perf_counter()`` readings, seconds):

* ``flush_start``: the step's chunk flush begins (its ``step-finish`` was just sent);
* ``flushed``: every chunk of the step was acknowledged by Kafka;
* ``saved``: the statement that stores the step and claims the next one returned;
* ``published``: the step result was acknowledged by Kafka, or handed to the background
  publisher (``THREADLINE_STEP_RESULT_ASYNC``);
* ``next_begun``: the executor starts the next step (its chunk writer made);
* ``first_sent``: the next step's first chunk was handed to the producer.

:func:`segments` turns them into milliseconds per segment; the worker logs them on its
``step gap`` line (run, thread and step ids bound), and the signals benchmark tables them.
"""

from __future__ import annotations

import itertools

POINTS = ("flush_start", "flushed", "saved", "published", "next_begun", "first_sent")
"""The points, in the order the worker passes them."""

SEGMENTS = ("chunk_flush_ms", "save_claim_ms", "result_publish_ms", "handover_ms", "next_setup_ms", "total_ms")
"""The segments :func:`segments` returns: one per pair of consecutive points, then the total."""


def segments(points: dict[str, float | None]) -> dict[str, float] | None:
    """Milliseconds between consecutive points of :data:`POINTS`, and ``total_ms`` from the first
    to the last. ``points`` maps a point's name to its ``perf_counter()`` reading in seconds.

    Returns ``None`` when a point is missing or ``None`` (e.g. the next step sent no chunk) or
    when the readings go backwards (they were not taken in one step gap).
    """
    values = [points.get(name) for name in POINTS]
    if any(v is None for v in values):
        return None
    times = [float(v) for v in values if v is not None]
    if any(b < a for a, b in itertools.pairwise(times)):
        return None
    out = {name: round((b - a) * 1000, 3) for name, (a, b) in zip(SEGMENTS, itertools.pairwise(times), strict=False)}
    out["total_ms"] = round((times[-1] - times[0]) * 1000, 3)
    return out
