"""Running agents' scorers after their runs finished, off the runs' critical path (decision 71).

The notification-scheduler, which reads the lifecycle topic already, calls :meth:`Scoring.on_run_finished`
for each ``run_finished``: the scorers the sampling chose get a ``pending`` row in ``run_scores``
(one short insert; the record's offset is committed only after it, so a crash re-reads the event
and the insert is idempotent). A background loop claims pending rows for ``claim_s``, runs the
scorers and stores each result once with its ``score`` lifecycle event (an outbox row in the same
transaction). A scheduler killed mid-scorer leaves the row pending: its claim expires and an
instance runs the scorer again; a stored row is never scored again.

Nothing here touches the run, its lease or the thread: the run's finish and the thread's next run
never wait for a scorer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

from threadline._internal.usercode import call_user
from threadline.errors import ModelCallError
from threadline.flows.publish import Outbox
from threadline.logging import get_logger
from threadline.runtime.agent import Agent
from threadline.runtime.scorers import ScorerEntry, ScorerRun, run_scorer, sampled, scorer_entries
from threadline.store import scores as store
from threadline.store.db import Database
from threadline.topics import Topics

log = get_logger(__name__)

MAX_ATTEMPTS = 3
"""Claims of one job before a failing scorer's error is stored as its result."""


async def entries_for(agent: Agent, request_context: Mapping[str, object]) -> list[ScorerEntry]:
    """The agent's scorers for a run (a function of the request context resolved; plain or async).

    Raises:
        ConfigurationError: the function returned something that is not a scorer mapping.
    """
    if agent.dynamic_scorers is not None:
        return scorer_entries(await call_user(agent.dynamic_scorers, dict(request_context)), agent.id)
    return agent.scorers


class Scoring:
    """Scorer jobs: queued on ``run_finished``, run by a background loop (see the module)."""

    def __init__(self, db: Database, outbox: Outbox, topics: Topics, agents: dict[str, Agent], *,
                 api_base: str | None, timeout_s: float, claim_s: float = 60.0, interval_s: float = 1.0,
                 batch: int = 8) -> None:
        self._db, self._outbox, self._topics, self._agents = db, outbox, topics, agents
        self._api_base, self._timeout_s = api_base, timeout_s
        self._claim_s, self._interval_s, self._batch = claim_s, interval_s, batch
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def wanted(self, agent_id: str | None) -> bool:
        """Whether the agent has scorers at all (no database work for the others)."""
        agent = self._agents.get(agent_id or "")
        return agent is not None and (bool(agent.scorers) or agent.dynamic_scorers is not None)

    async def on_run_finished(self, run_id: str, agent_id: str | None) -> int:
        """Queue the sampled scorers of a finished run. Returns how many jobs were new."""
        if not self.wanted(agent_id):
            return 0
        async with self._db.connection() as conn:
            run = await store.run_for_scoring(conn, run_id)
            if run is None or run["status"] != "finished":
                return 0
            entries = await entries_for(self._agents[run["agent_id"]], run["request_context"])
            names = [e.name for e in entries if sampled(run_id, e.name, e.rate)]
            new = await store.enqueue(conn, run, names)
        if new:
            log.info("scorers queued", run_id=run_id, thread_id=run["thread_id"], scorers=names)
            self._wake.set()
        return new

    async def start(self) -> None:
        self._wake.set()  # what a previous instance left pending
        self._task = asyncio.create_task(self._loop(), name="scorers")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._interval_s)
            self._wake.clear()
            try:
                while await self.pass_once():
                    pass
            except Exception:
                log.warning("scorer pass failed", exc_info=True)

    async def pass_once(self) -> int:
        """Claim and run one batch of pending jobs. Returns how many were claimed."""
        async with self._db.connection() as conn:
            jobs = await store.claim(conn, claim_s=self._claim_s, limit=self._batch)
        if jobs:
            done = await asyncio.gather(*(self._score(j["run_id"], j["scorer"], j["attempts"]) for j in jobs),
                                        return_exceptions=True)
            for failed in (d for d in done if isinstance(d, BaseException)):
                log.warning("scorer job not stored", error=repr(failed)[:300])  # stays pending: claimed again
        return len(jobs)

    async def _score(self, run_id: str, name: str, attempts: int) -> None:
        async with self._db.connection() as conn:
            run = await store.run_for_scoring(conn, run_id)
        if run is None:
            return
        agent = self._agents.get(run["agent_id"])
        score: float | None = None
        reason: str | None = None
        error: dict[str, str] | None = None
        try:
            entry = next((e for e in await entries_for(agent, run["request_context"]) if e.name == name), None) \
                if agent is not None else None
            if entry is None:
                raise LookupError(f"agent {run['agent_id']} has no scorer {name!r}")
            subject = ScorerRun(run_id=run_id, agent_id=run["agent_id"], resource_id=run["resource_id"],
                                thread_id=run["thread_id"], input=run["input"], output=run["output"],
                                request_context=run["request_context"])
            score, reason = await run_scorer(entry, subject, api_base=self._api_base, timeout_s=self._timeout_s)
        except Exception as exc:  # noqa: BLE001 - user code: any failure is the scorer's result (or retried)
            retry = isinstance(exc, ModelCallError) and exc.retryable and attempts < MAX_ATTEMPTS
            log.warning("scorer failed", run_id=run_id, thread_id=run["thread_id"], scorer=name, attempt=attempts,
                        retry=retry, error=str(exc)[:300])
            if retry:
                return  # the claim expires; the job runs again
            error = {"type": type(exc).__name__, "message": str(exc)[:2000]}
        async with self._db.connection() as conn:
            queued = await store.store(conn, self._topics, run=run, scorer=name, score=score, reason=reason,
                                       error=error)
        if queued is not None:
            await self._outbox.flush([queued])
            log.info("run scored", run_id=run_id, thread_id=run["thread_id"], scorer=name, score=score)
