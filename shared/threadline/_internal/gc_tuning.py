"""Python's cyclic garbage collector, set for a long-running service process.

Two measures (docs/decisions.md, decision 91):

- :func:`set_young_threshold` at process start: the young generation is collected every
  ``threshold`` container allocations instead of Python's 700, so the objects of a step or a
  chunk in flight have usually died before a collection looks at them and few are promoted to
  the old generation (whose full collections walk every object the process holds).
- :func:`freeze_start_up` once the service has started: the objects of its imports and start-up
  (about 400,000 in a worker: litellm, pydantic, aiokafka) move to the permanent generation that
  no collection walks (``gc.freeze``); they live as long as the process anyway.
"""

from __future__ import annotations

import gc


def set_young_threshold(threshold: int) -> None:
    """Collect the young generation every ``threshold`` allocations (``gc.set_threshold``'s first
    value; the older generations keep theirs); ``0`` keeps Python's own setting."""
    if threshold > 0:
        gc.set_threshold(threshold, *gc.get_threshold()[1:])


def freeze_start_up() -> int:
    """Move every object tracked so far to the permanent generation; returns how many are frozen
    in all (``gc.get_freeze_count()``)."""
    gc.freeze()
    return gc.get_freeze_count()
