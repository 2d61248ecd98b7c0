"""One keep-alive loop per worker for every step in flight.

While a step runs, its heartbeat (``runs.step_heartbeat``, fenced by the lease epoch) is refreshed
every ``step_heartbeat_s`` and its thread lease every ``lease_ttl_s / 3``, so a slow step is never
taken for a dead one (issue 6, item 2). Refreshing each step on its own costs one pooled
connection per step per beat: with hundreds of concurrent runs that starves the pool and the
heartbeats themselves time out. Here every beat is one ``UPDATE … FROM unnest(…)`` for all the
steps of this process, and every renewal one more.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

from threadline.logging import get_logger

log = get_logger(__name__)

_BEAT = """
UPDATE runs SET step_heartbeat = now()
FROM unnest($1::text[], $2::int[]) AS u(run_id, attempt)
WHERE runs.run_id = u.run_id AND runs.step_owner = $3 AND runs.attempt = u.attempt
  AND runs.status = 'running'
  AND EXISTS (SELECT 1 FROM thread_leases l WHERE l.thread_id = runs.thread_id
              AND l.run_id = runs.run_id AND l.epoch = runs.epoch)
RETURNING runs.run_id
"""

_RENEW = """
UPDATE thread_leases l SET expires_at = now() + make_interval(secs => $4), updated_at = now()
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(thread_id, run_id, epoch)
WHERE l.thread_id = u.thread_id AND l.run_id = u.run_id AND l.epoch = u.epoch
RETURNING l.run_id
"""


@dataclass
class _Step:
    run_id: str
    thread_id: str
    epoch: int
    writer: Any  # ChunkWriter: its ``attempt`` is the one this process executes
    lease_held: bool = True
    owned: bool = True


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
        """Keep ``run``'s step alive until :meth:`discard` (starts the loop on first use)."""
        self._steps[run["run_id"]] = _Step(run["run_id"], run["thread_id"], run["epoch"], writer)
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
            except Exception:  # noqa: BLE001 - try again at the next beat
                log.warning("keep-alive failed; retried at the next beat", steps=len(self._steps), exc_info=True)

    async def beat(self, *, renew: bool) -> None:
        """One heartbeat for every step in flight, and (``renew``) one lease renewal for all.

        Steps whose heartbeat did not move were taken over or lost their thread; steps whose
        lease did not renew lost it (aborted or superseded): both are logged, and a lost lease
        is not renewed again (every later write of that step is fenced out anyway).
        """
        steps = list(self._steps.values())
        if not steps:
            return
        async with self.db.connection() as conn:
            beating = [s for s in steps if s.owned]
            if beating:
                rows = await conn.fetch(_BEAT, [s.run_id for s in beating], [s.writer.attempt for s in beating],
                                        self.owner)
                alive = {r["run_id"] for r in rows}
                for s in beating:
                    if s.run_id not in alive and s.run_id in self._steps:
                        s.owned = False
                        log.warning("step taken over by another worker, or the run lost the thread", run_id=s.run_id)
            held = [s for s in steps if s.lease_held]
            if renew and held:
                rows = await conn.fetch(_RENEW, [s.thread_id for s in held], [s.run_id for s in held],
                                        [s.epoch for s in held], self.lease_ttl_s)
                renewed = {r["run_id"] for r in rows}
                for s in held:
                    if s.run_id not in renewed and s.run_id in self._steps:
                        s.lease_held = False
                        log.warning("lease lost while the step runs", run_id=s.run_id)
