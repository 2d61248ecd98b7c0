"""Named pause points for fault-injection tests.

``THREADLINE_PAUSE_POINTS=name1,name2`` makes a process stop at those points: it appends the
point's name to ``THREADLINE_PAUSE_FILE`` and sleeps, so a test can ``kill -9`` it exactly there.
With ``THREADLINE_PAUSE_RELEASE=<path>`` the hold also ends once that file exists (a test
releases a held — possibly frozen and resumed — process at a moment of its choosing). With
``THREADLINE_PAUSE_MATCH=<text>`` only the points reached with a key containing it hold (a test
holds its own run's step, not a step of a run an earlier test left behind).
Without the variable a pause point costs one dict lookup.
"""

from __future__ import annotations

import asyncio
import os

_POINTS = frozenset(p for p in os.environ.get("THREADLINE_PAUSE_POINTS", "").split(",") if p)
_FILE = os.environ.get("THREADLINE_PAUSE_FILE")
_SECONDS = float(os.environ.get("THREADLINE_PAUSE_SECONDS", "3600"))
_DEAF = os.environ.get("THREADLINE_PAUSE_DEAF") == "1"  # a stalled owner: aborts do not reach it
_RELEASE = os.environ.get("THREADLINE_PAUSE_RELEASE")
_MATCH = os.environ.get("THREADLINE_PAUSE_MATCH", "")


def deaf() -> bool:
    """True when this process must not hear aborts (``THREADLINE_PAUSE_DEAF=1``): its pauses
    ignore cancellation and abort notifications are dropped, so it writes late (case C27)."""
    return _DEAF


def armed(name: str) -> bool:
    """True if ``name`` is an armed pause point in this process."""
    return name in _POINTS


async def pause_point(name: str, key: str = "") -> None:
    """Hold here (``THREADLINE_PAUSE_SECONDS``, default an hour) if ``name`` is armed and ``key``
    (e.g. the thread id) contains ``THREADLINE_PAUSE_MATCH`` (any key when unset); with
    ``THREADLINE_PAUSE_DEAF=1`` the hold ignores cancellation (a stalled owner writes late)."""
    if name not in _POINTS or _MATCH not in key:
        return
    if _FILE:
        with open(_FILE, "a") as fh:  # noqa: ASYNC230 - fault injection in tests only; one short line
            fh.write(name + "\n")
    if _RELEASE:
        await _hold_until_released(_RELEASE)
        return
    if not _DEAF:
        await asyncio.sleep(_SECONDS)
        return
    loop = asyncio.get_running_loop()
    until = loop.time() + _SECONDS
    while loop.time() < until:  # an abort's cancellation does not reach a stalled process
        try:
            await asyncio.sleep(until - loop.time())
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()


async def _hold_until_released(path: str) -> None:
    """Hold until the file at ``path`` exists (polled every 50 ms), at most ``_SECONDS``."""
    loop = asyncio.get_running_loop()
    until = loop.time() + _SECONDS
    # polling a file (not an Event): the release comes from the test process, outside this one
    while not os.path.exists(path) and loop.time() < until:  # noqa: ASYNC110, ASYNC240 - a file written by another process, stat per 50 ms, tests only
        await asyncio.sleep(0.05)


# Fail points: ``THREADLINE_FAIL_POINTS=name`` makes the code at that point inject a real fault
# (e.g. cut its own Postgres connection) the first ``THREADLINE_FAIL_TIMES`` (1) times it is
# reached with a key containing ``THREADLINE_FAIL_MATCH`` (any key when unset); each injection
# appends ``name:failed`` to ``THREADLINE_PAUSE_FILE``.
_FAIL_POINTS = frozenset(p for p in os.environ.get("THREADLINE_FAIL_POINTS", "").split(",") if p)
_FAIL_TIMES = int(os.environ.get("THREADLINE_FAIL_TIMES", "1"))
_FAIL_MATCH = os.environ.get("THREADLINE_FAIL_MATCH", "")
_failed: dict[str, int] = {}


def should_fail(name: str, key: str = "") -> bool:
    """True if the caller must inject its fault at ``name`` now (see the fail point notes above)."""
    if name not in _FAIL_POINTS or _FAIL_MATCH not in key or _failed.get(name, 0) >= _FAIL_TIMES:
        return False
    _failed[name] = _failed.get(name, 0) + 1
    if _FILE:
        with open(_FILE, "a") as fh:
            fh.write(f"{name}:failed\n")
    return True
