"""Named pause points for fault-injection tests.

``THREADLINE_PAUSE_POINTS=name1,name2`` makes a process stop at those points: it appends the
point's name to ``THREADLINE_PAUSE_FILE`` and sleeps, so a test can ``kill -9`` it exactly there.
Without the variable a pause point costs one dict lookup.
"""

from __future__ import annotations

import asyncio
import os

_POINTS = frozenset(p for p in os.environ.get("THREADLINE_PAUSE_POINTS", "").split(",") if p)
_FILE = os.environ.get("THREADLINE_PAUSE_FILE")
_SECONDS = float(os.environ.get("THREADLINE_PAUSE_SECONDS", "3600"))


def armed(name: str) -> bool:
    """True if ``name`` is an armed pause point in this process."""
    return name in _POINTS


async def pause_point(name: str) -> None:
    """Hold here (``THREADLINE_PAUSE_SECONDS``, default an hour) if ``name`` is armed."""
    if name not in _POINTS:
        return
    if _FILE:
        with open(_FILE, "a") as fh:
            fh.write(name + "\n")
    await asyncio.sleep(_SECONDS)
