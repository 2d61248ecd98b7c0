"""A set of ids that forgets each one a fixed time after it was added (bounded memory)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable


class RecentIds:
    """Ids heard within the last ``keep_s`` seconds; older ones are dropped on the next :meth:`add`.

    For notifications that matter only for a short window after they arrive (an abort heard
    just before a step begins here) but arrive for every run in the cluster: a plain set would
    grow by one id per run forever.

    Args:
        keep_s: how long an id is kept, in seconds (> 0).
        clock: monotonic seconds (for tests).
    """

    def __init__(self, keep_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._keep_s = keep_s
        self._clock = clock
        self._added: OrderedDict[str, float] = OrderedDict()

    def add(self, item: str) -> None:
        """Keep ``item`` for ``keep_s`` from now (added again: the window starts again)."""
        now = self._clock()
        self._added.pop(item, None)
        self._added[item] = now
        while self._added:
            oldest, at = next(iter(self._added.items()))
            if now - at < self._keep_s:
                break
            del self._added[oldest]

    def discard(self, item: str) -> None:
        """Forget ``item`` (no error when absent)."""
        self._added.pop(item, None)

    def __contains__(self, item: object) -> bool:
        return item in self._added

    def __len__(self) -> int:
        return len(self._added)
