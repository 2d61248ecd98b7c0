"""``streamParts`` across a run's steps (Mastra's ``processOutputStream`` gets every part of the
run so far, earlier steps' too): each step's parts, per processor, are kept with the run's
configuration on the worker running it, and a later step's runner starts from them
(docs/decisions.md#stream-parts-per-worker).

Kept in memory only: a step taken over by another worker (after a crash, or a rebalance) starts
from the parts of the steps that worker ran itself. Pure functions over ``{step: {processor id:
[part, ...]}}``."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import TypeVar

T = TypeVar("T")

PartsByStep = MutableMapping[int, dict[str, list[T]]]
"""``{step number: {processor id: the parts that processor saw in that step}}``."""


def parts_before(kept: Mapping[int, Mapping[str, Sequence[T]]], step: int) -> dict[str, list[T]]:
    """Each processor's parts of the steps before ``step``, in step order: the list its
    ``stream_parts`` starts the step with (a fresh list per processor, the caller appends to it)."""
    out: dict[str, list[T]] = {}
    for number in sorted(n for n in kept if n < step):
        for processor_id, parts in kept[number].items():
            out.setdefault(processor_id, []).extend(parts)
    return out


def keep_step(kept: PartsByStep[T], step: int, seen: Mapping[str, Sequence[T]],
              base: Mapping[str, int]) -> None:
    """Keep what each processor saw in ``step``: ``seen[id]`` past its first ``base[id]`` parts
    (those of earlier steps). A step run again (a transient fault, a re-executed step) replaces
    what an earlier execution of it, or of a later step, kept."""
    for number in [n for n in kept if n >= step]:
        del kept[number]
    kept[step] = {processor_id: list(parts[base.get(processor_id, 0):]) for processor_id, parts in seen.items()}
