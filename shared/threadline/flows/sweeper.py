"""The sweeper loop of the run-orchestrator (see :mod:`threadline.orchestration.recovery`).

Every ``sweep_interval_s`` each orchestrator instance lists the runs that hold their thread and
showed no progress for ``stuck_after_s``; for each it opens a transaction and claims the run row
with ``FOR UPDATE SKIP LOCKED`` — whichever instance locks it first handles it, the others skip
it, and the decision is taken again on the locked row, so a run another instance just recovered
(its ``updated_at`` moved) is left alone. The action and its outgoing events (a step task, a
step result again, or the run's failure with its terminal chunks) commit together with a
``run_recoveries`` row, then the outbox rows are flushed (the relay covers a failed flush).

Each recovery is logged as a warning (``stuck run recovered``, with the run, step, attempt,
action and reason) and counted (:attr:`Sweeper.recovered`, also in every such log line): each
one is a bug elsewhere to find.
"""

from __future__ import annotations

from threadline._internal.periodic import Periodic
from threadline.flows import recovery
from threadline.flows.publish import Outbox
from threadline.logging import get_logger
from threadline.orchestration.recovery import decide
from threadline.store import recoveries, sub_agents
from threadline.store.db import Database
from threadline.topics import Topics

log = get_logger(__name__)


class Sweeper:
    """Finds stuck runs and drives them on.

    Args:
        db / outbox / topics: the orchestrator's.
        instance: this instance's name (stored with each recovery).
        interval_s: seconds between sweeps.
        stuck_after_s: how long a run may show no progress before it counts as stuck.
        max_recoveries: recoveries of one step after which the run is failed instead.
        lease_ttl_s: the lease TTL (a failed run hands its thread to what waits).
        sub_agent_timeout_s: how long a sub-agent call may wait for its child run before it ends
            as a ``ToolTimeoutError`` tool error and the child is aborted (``None``: no bound;
            decision 218).
    """

    def __init__(self, *, db: Database, outbox: Outbox, topics: Topics, instance: str, interval_s: float,
                 stuck_after_s: float, max_recoveries: int, lease_ttl_s: float,
                 sub_agent_timeout_s: float | None = None) -> None:
        self._sub_agent_timeout_s = sub_agent_timeout_s
        self._db = db
        self._outbox = outbox
        self._topics = topics
        self._instance = instance
        self._interval_s = interval_s
        self._stuck_after_s = stuck_after_s
        self._max_recoveries = max_recoveries
        self._lease_ttl_s = lease_ttl_s
        self._periodic = Periodic("stuck-run-sweeper", interval_s, self.sweep_once,
                                  failure="sweep failed; tried again at the next interval",
                                  timeout_s=outbox.ack_timeout_s + 60.0)
        self.recovered = 0
        """Recoveries made by this instance since it started."""

    async def start(self) -> None:
        """Start sweeping every ``interval_s``."""
        await self._periodic.start()

    async def stop(self) -> None:
        """Stop sweeping."""
        await self._periodic.stop()

    async def sweep_once(self) -> int:
        """One pass; returns how many runs it recovered (after ending the overdue sub-agent calls)."""
        await self.time_out_children()
        async with self._db.connection() as conn:
            ids = await recoveries.candidates(conn, stuck_after_s=self._stuck_after_s)
        done = 0
        for run_id in ids:
            async with self._db.transaction() as conn:
                row = await recoveries.claim(conn, run_id, stuck_after_s=self._stuck_after_s)
                if row is None:
                    continue
                decision = decide(recovery.snapshot(row), stuck_after_s=self._stuck_after_s,
                                  max_recoveries=self._max_recoveries)
                if decision.action == "none":
                    continue
                kw = {"reason": decision.reason, "instance": self._instance}
                if decision.action == "reschedule":
                    out = await recovery.reschedule(conn, row, self._topics, **kw)
                elif decision.action == "redeliver_result":
                    out = await recovery.redeliver_result(conn, row, self._topics, **kw)
                else:
                    out = await recovery.fail(conn, row, self._topics, lease_ttl_s=self._lease_ttl_s, **kw)
            self.recovered += 1
            done += 1
            log.warning("stuck run recovered", run_id=run_id, thread_id=row["thread_id"], step=row["step"],
                        attempt=row["attempt"], status=row["status"], steps_done=row["steps_done"],
                        action=decision.action, reason=decision.reason, recoveries=self.recovered)
            try:
                await self._outbox.flush(out)
            except Exception:  # stored in the outbox: the relay publishes it; the sweep goes on
                log.warning("recovery not published yet; left to the outbox relay", run_id=run_id, exc_info=True)
        return done

    async def time_out_children(self) -> int:
        """End every sub-agent call that waited longer than ``sub_agent_timeout_s`` for its child
        run (the parent's tool error, the child aborted; decision 218); returns how many."""
        if self._sub_agent_timeout_s is None:
            return 0
        async with self._db.connection() as conn:
            overdue = await sub_agents.overdue_calls(conn, self._sub_agent_timeout_s)
        done = 0
        for parent_run_id, tool_call_id in overdue:
            async with self._db.transaction() as conn:
                out = await sub_agents.time_out_call(conn, parent_run_id, tool_call_id, self._sub_agent_timeout_s,
                                                     self._topics, self._lease_ttl_s)
            if not out:
                continue
            done += 1
            try:
                await self._outbox.flush(out)
            except Exception:  # stored in the outbox: the relay publishes it
                log.warning("sub-agent timeout not published yet; left to the outbox relay",
                            run_id=parent_run_id, exc_info=True)
        return done
