"""One keep-alive loop per worker for every step in flight.

While a step runs, its heartbeat (``runs.step_heartbeat``, fenced by the lease epoch) is refreshed
every ``step_heartbeat_s`` and its thread lease every ``lease_ttl_s / 3``, so a slow step is never
taken for a dead one. Refreshing each step on its own costs one pooled
connection per step per beat: with hundreds of concurrent runs that starves the pool and the
heartbeats themselves time out. Here every beat is one ``UPDATE … FROM unnest(…)`` for all the
steps of this process, and every renewal one more.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from threadline.logging import get_logger
from threadline.store.steps import beat_all, renew_all

log = get_logger(__name__)


@dataclass
class _Step:
    run_id: str
    thread_id: str
    epoch: int
    writer: Any  # ChunkWriter: its ``attempt`` is the one this process executes
    lease_held: bool = True
    owned: bool = True
    lost: list[str] = field(default_factory=list)  # what the last beat found, told at the next one


@dataclass
class KeepAlive:
    """Heartbeats and lease renewals of this process's steps, batched.

    Args:
        db: the service's :class:`~threadline.store.db.Database`.
        owner: this process's step-owner token (``runs.step_owner``).
        beat_s: seconds between heartbeats (``step_heartbeat_s``).
        renew_every_s: seconds between lease renewals (``lease_ttl_s / 3``).
        lease_ttl_s: how far each renewal pushes the lease's expiry, in seconds.
    """

    db: Any
    owner: str
    beat_s: float
    renew_every_s: float
    lease_ttl_s: float
    _steps: dict[str, _Step] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None

    def add(self, run: Any, writer: Any) -> None:
        """Keep ``run``'s step alive until :meth:`discard` (starts the loop on first use).

        ``run``: a :class:`~threadline.runtime.step.ports.StepRun`, or a mapping with ``run_id``,
        ``thread_id`` and ``epoch``; ``writer``: the step's chunk sink (its ``attempt`` is the one
        this process executes)."""
        if isinstance(run, Mapping):
            step = _Step(run["run_id"], run["thread_id"], run["epoch"], writer)
        else:
            step = _Step(run.run_id, run.thread_id, run.epoch, writer)
        self._steps[step.run_id] = step
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name="step-keep-alive")

    def discard(self, run_id: str) -> None:
        """The step ended (or was handed back): stop keeping it alive."""
        self._steps.pop(run_id, None)

    async def close(self) -> None:
        """Stop the loop (service shutdown)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        renewed = loop.time()
        while True:
            await asyncio.sleep(self.beat_s)
            renew = loop.time() - renewed >= self.renew_every_s
            try:
                await self.beat(renew=renew)
                if renew:
                    renewed = loop.time()
            except Exception:
                log.warning("keep-alive failed; retried at the next beat", steps=len(self._steps), exc_info=True)

    async def beat(self, *, renew: bool) -> None:
        """One heartbeat for every step in flight, and (``renew``) one lease renewal for all.

        Steps whose heartbeat did not move were taken over or lost their thread; steps whose
        lease did not renew lost it (aborted or superseded): neither is beaten or renewed again
        (every later write of that step is fenced out anyway), and both are logged at the next
        beat if the step is still kept alive then. A step whose end was just committed looks
        the same to a beat that waited for its row, until the store hands it back
        (``discard``), a moment later: that step is never logged.
        """
        steps = list(self._steps.values())
        _tell_lost(steps)
        if not steps:
            return
        async with self.db.connection() as conn:
            if beating := [s for s in steps if s.owned]:
                alive = await beat_all(conn, [s.run_id for s in beating], [s.writer.attempt for s in beating],
                                       self.owner)
                for s in self._unanswered(beating, alive):
                    s.owned = False
                    s.lost.append("step taken over by another worker, or the run lost the thread")
            held = [s for s in steps if s.lease_held]
            if renew and held:
                renewed = await renew_all(conn, [s.thread_id for s in held], [s.run_id for s in held],
                                          [s.epoch for s in held], self.lease_ttl_s)
                for s in self._unanswered(held, renewed):
                    s.lease_held = False
                    s.lost.append("lease lost while the step runs")

    def _unanswered(self, steps: list[_Step], answered: Collection[str]) -> list[_Step]:
        """Those of ``steps`` whose run a batched statement did not answer for (``answered``: the
        run ids it did), and which are still kept alive: one discarded meanwhile just ended."""
        return [s for s in steps if s.run_id not in answered and s.run_id in self._steps]


def _tell_lost(steps: list[_Step]) -> None:
    """Log what the previous beat found lost for each of ``steps`` still kept alive, and forget it."""
    for s in steps:
        for message in s.lost:
            log.warning(message, run_id=s.run_id)
        s.lost.clear()
