"""The step path's latency budget (docs/decisions.md, "The step path"): where the time of a step's start goes, in the worker.

**A continued step.** Between a step's ``step-finish`` and the first chunk of the step the same
worker continues the run with, the worker passes these points (``time.perf_counter()`` readings, seconds):

* ``flush_start``: the step's chunk flush begins (its ``step-finish`` was just sent);
* ``flushed``: every chunk of the step was acknowledged by Kafka;
* ``saved``: the statement that stores the step and claims the next one returned;
* ``published``: the step result (or the step's announcement) was handed to the background
  publisher (decision 37);
* ``next_begun``: the executor starts the next step (its chunk writer made);
* ``first_sent``: the next step's first chunk was handed to the producer.

:func:`segments` turns them into milliseconds per segment; the worker logs them on its
``step gap`` line (run, thread and step ids bound), and the signals benchmark tables them.
:func:`save_split` splits ``save_claim_ms`` further at ``save_sent`` (the statement sent on a
connection in hand) and ``save_returned`` (its answer read).

**A step begun from its step task** (a run's first step, figure 1's path; decision 84), the points
of :data:`START_POINTS`:

* ``received``: the executor took the step task (the consumer handed it over);
* ``claimed``: the chunk topic checked and ``threadline_begin_step`` returned (the step claimed);
* ``model_called``: the step's first model call was issued (``litellm.acompletion`` called:
  processors, message list and the first chunks are behind);
* ``model_opened``: that call returned its open stream (litellm's request building, its thread
  hop, the HTTP request and the provider's response headers);
* ``first_text``: the step's first ``text-delta`` chunk was handed to the producer.

:func:`start_segments` turns them into the ``step start`` line's milliseconds; the time to first
text benchmark tables them.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

POINTS = ("flush_start", "flushed", "saved", "published", "next_begun", "first_sent")
"""The points, in the order the worker passes them."""

SEGMENTS = ("chunk_flush_ms", "save_claim_ms", "result_publish_ms", "handover_ms", "next_setup_ms", "total_ms")
"""The segments :func:`segments` returns: one per pair of consecutive points, then the total."""


START_POINTS = ("received", "claimed", "model_called", "model_opened", "first_text")
"""The points of a step begun from its task, in the order the worker passes them."""

START_SEGMENTS = ("claim_ms", "setup_ms", "model_open_ms", "first_text_ms", "total_ms")
"""The segments :func:`start_segments` returns, then the total."""


def _split(points: Mapping[str, float | None], names: tuple[str, ...], out_names: tuple[str, ...]
           ) -> dict[str, float] | None:
    values = [points.get(name) for name in names]
    if any(v is None for v in values):
        return None
    times = [float(v) for v in values if v is not None]
    if any(b < a for a, b in itertools.pairwise(times)):
        return None
    out = {name: round((b - a) * 1000, 3) for name, (a, b) in zip(out_names, itertools.pairwise(times), strict=False)}
    out["total_ms"] = round((times[-1] - times[0]) * 1000, 3)
    return out


def segments(points: dict[str, float | None]) -> dict[str, float] | None:
    """Milliseconds between consecutive points of :data:`POINTS`, and ``total_ms`` from the first
    to the last. ``points`` maps a point's name to its ``perf_counter()`` reading in seconds.

    Returns ``None`` when a point is missing or ``None`` (e.g. the next step sent no chunk) or
    when the readings go backwards (they were not taken in one step gap).
    """
    return _split(points, POINTS, SEGMENTS)


def start_segments(points: Mapping[str, float | None]) -> dict[str, float] | None:
    """Milliseconds between consecutive points of :data:`START_POINTS` (``perf_counter()``
    seconds), as :data:`START_SEGMENTS`, and ``total_ms``. A step that called no model or streamed
    no text has the segments up to its last point and no ``total_ms``; ``None`` when even
    ``received`` or ``claimed`` is missing, or the readings go backwards."""
    present = []
    for name in START_POINTS:
        if points.get(name) is None:
            break
        present.append(name)
    if len(present) < 2:
        return None
    out = _split(points, tuple(present), START_SEGMENTS)
    if out is not None and len(present) < len(START_POINTS):
        del out["total_ms"]
    return out


SAVE_SEGMENTS = ("save_wait_ms", "save_sql_ms", "save_after_ms")
"""The parts of ``save_claim_ms`` :func:`save_split` returns: ``flushed`` → ``save_sent`` (the
step's state built, a connection acquired), → ``save_returned`` (the statement's round trip:
sending, running, committing, the answer read), → ``saved``."""


def save_split(points: dict[str, float | None]) -> dict[str, float]:
    """Milliseconds of :data:`SAVE_SEGMENTS` from the readings ``flushed``, ``save_sent``,
    ``save_returned`` and ``saved`` (``perf_counter()`` seconds); ``{}`` when one is missing,
    zero or the readings go backwards."""
    values = [points.get(name) for name in ("flushed", "save_sent", "save_returned", "saved")]
    if any(not v for v in values):
        return {}
    times = [float(v) for v in values if v]
    if any(b < a for a, b in itertools.pairwise(times)):
        return {}
    return {name: round((b - a) * 1000, 3) for name, (a, b) in zip(SAVE_SEGMENTS, itertools.pairwise(times), strict=True)}
