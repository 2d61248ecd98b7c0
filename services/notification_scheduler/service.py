"""notification-scheduler: owns the notification inbox. Delivers due records (``deliver_at`` /
``summary_at`` reached) on a timer, and at once for a thread the lifecycle topic says went idle:
held records are re-decided by the agent's policy (``hold``, docs/decisions.md#queue-and-hold), then what waited for
the idle thread goes (high notifications in full, low digests to subscribers only). Several
instances share the work: each thread is handled under its lease row lock, records re-read there.

It also runs the agents' scorers after their runs finished (:mod:`threadline.flows.scoring`, decision
71): a ``run_finished`` queues the sampled scorers' jobs, a background loop runs and stores them.

It also runs the idle-topic sweep: chunk topics of threads idle for ``chunk_topic_idle_s`` are
deleted (docs/decisions.md 40-42).

Its clock (what is due) is PostgreSQL's ``now()``; ``THREADLINE_SCHEDULER_TEST_CLOCK=1`` (tests
only) adds an offset from ``inbox_test_clock`` — see :mod:`threadline.store.clock`.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from pydantic import TypeAdapter

from threadline.events import LifecycleEvent
from threadline.events.codec import decode
from threadline.flows.inbox import dispatch_due, redecide_held
from threadline.flows.scoring import Scoring
from threadline.flows.topic_retention import IdleTopicSweep
from threadline.kafka.consumer import Record
from threadline.logging import get_logger
from threadline.runtime.registry import load_agents
from threadline.service import Service
from threadline.store.clock import SchedulerClock
from threadline.store.listen import Listener
from threadline.transient import TICK_BACKOFF, TICK_RETRY_S, retrying

INBOX_DUE_CHANNEL = "threadline_inbox_due"
"""NOTIFY channel of records that became due now (trigger of migration 0008)."""

log = get_logger(__name__)
_ADAPTER: TypeAdapter[LifecycleEvent] = TypeAdapter(LifecycleEvent)


async def _cancelled(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and wait until it ended."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


class NotificationScheduler(Service):
    name = "notification_scheduler"

    def topics_in(self) -> list[str]:
        return [self.topics.lifecycle]

    async def setup(self) -> None:
        self.agents = load_agents(self.settings.agents_module)
        self.clock = SchedulerClock(test_clock=self.settings.scheduler_test_clock)
        if self.clock.test_clock:
            log.warning("notification-scheduler uses the TEST clock (THREADLINE_SCHEDULER_TEST_CLOCK)")
        self._due = asyncio.Event()
        # due-work channel on a dedicated, self-healing connection (C26); after a loss it catches up
        self.due_listener = Listener(self.settings.pg_session_dsn, INBOX_DUE_CHANNEL, lambda _p: self._due.set(),
                                     self._catch_up, health_s=self.settings.pg_listen_health_s)
        self.on_stop(self.due_listener.stop, before_drain=True)
        await self.due_listener.start()
        self.scoring = Scoring(self.db, self.outbox, self.topics, self.agents, api_base=self.settings.model_api_base,
                               timeout_s=self.settings.model_timeout_s, claim_s=self.settings.scorer_claim_s,
                               interval_s=self.settings.scheduler_interval_s)
        self.on_stop(self.scoring.stop, before_drain=True)
        await self.scoring.start()
        self.topic_sweep = IdleTopicSweep(self.db, self.admin, idle_s=self.settings.chunk_topic_idle_s,
                                          interval_s=self.settings.chunk_topic_sweep_s)
        if self.settings.chunk_topic_idle_s > 0:
            self.on_stop(self.topic_sweep.stop, before_drain=True)
            await self.topic_sweep.start()
        ticker = asyncio.create_task(self._tick_loop(), name="inbox-ticks")
        self.on_stop(lambda: _cancelled(ticker), before_drain=True)  # stopped first

    def _policy(self, agent_id: str) -> dict[str, Any] | None:
        agent = self.agents.get(agent_id)
        return agent.delivery_policy if agent else None

    async def _catch_up(self) -> None:
        self._due.set()

    async def handle(self, record: Record) -> None:
        event = decode(record.value, _ADAPTER)
        if event.type == "thread_idle":  # what waited for the thread to be idle goes now
            await self.dispatch(thread_id=event.thread_id, resource_id=event.resource_id)
        elif event.type == "run_finished" and event.run_id:  # its scorers' jobs, run off the run's path
            await self.scoring.on_run_finished(event.run_id, event.agent_id)

    async def dispatch(self, thread_id: str | None = None, resource_id: str | None = None) -> None:
        """One pass: (on idle) re-decide the thread's held records, then deliver what is due."""
        ids: list[int] = []
        async with self.db.connection() as conn:
            now = await self.clock.now(conn)
            if thread_id is not None and resource_id is not None:
                ids += await redecide_held(conn, resource_id=resource_id, thread_id=thread_id, policy_of=self._policy,
                                           now=now, topics=self.topics, lease_ttl_s=self.settings.lease_ttl_s,
                                           digest_window_s=self.settings.digest_window_s)
            sent, threads = await dispatch_due(conn, topics=self.topics, lease_ttl_s=self.settings.lease_ttl_s,
                                               now=now, thread_id=thread_id)
            ids += sent
        if not ids:  # nothing to publish: no thread's topic is needed (most idle threads)
            return
        if thread_id is not None and resource_id is not None:
            threads.add((resource_id, thread_id))
        for res, tid in threads if not self.topics.shared_layout else ():  # the shared topic was made at start
            await self.admin.ensure_chunk_topic(self.topics.chunks(res, tid),
                                                retention_ms=self.settings.chunk_retention_ms, thread=(res, tid))
        await self.outbox.flush(ids)
        log.info("inbox delivered", events=len(ids), threads=len(threads), thread_id=thread_id)

    async def _tick_loop(self) -> None:
        while True:  # a NOTIFY (or a catch-up) wakes it early
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._due.wait(), self.settings.scheduler_interval_s)
            self._due.clear()
            try:  # a lost connection (Postgres restarting) is retried with backoff
                async for attempt in retrying(TICK_BACKOFF, for_s=TICK_RETRY_S):
                    with attempt:
                        await self.dispatch()
            except Exception:
                log.exception("inbox tick failed")
