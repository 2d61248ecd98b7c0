"""run-orchestrator: the run state machine. Consumes run commands and step results; schedules
steps, ends runs, releases or hands over the thread lease, starts queued turns; its sweeper
drives on runs that nothing drives any more (``threadline.flows.sweeper``)."""

from __future__ import annotations

from threadline._internal.faults import pause_point, should_fail
from threadline.events import AbortRun, ResolveToolCall, StartRun, StepResult
from threadline.events.codec import decode
from threadline.events.commands import INTERNAL_ADAPTER
from threadline.flows.approvals import resolve_tool_call
from threadline.flows.orchestration import abort_run, on_step_result, start_run
from threadline.flows.sweeper import Sweeper
from threadline.kafka.consumer import Record
from threadline.logging import get_logger
from threadline.service import Service

log = get_logger(__name__)


class RunOrchestrator(Service):
    name = "run_orchestrator"

    async def setup(self) -> None:
        self.sweeper = Sweeper(db=self.db, outbox=self.outbox, topics=self.topics, instance=self.settings.instance_id,
                               interval_s=self.settings.sweep_interval_s, stuck_after_s=self.settings.stuck_after_s,
                               max_recoveries=self.settings.sweep_max_recoveries,
                               lease_ttl_s=self.settings.lease_ttl_s,
                               sub_agent_timeout_s=self.settings.sub_agent_timeout_s)
        self.on_stop(self.sweeper.stop, before_drain=True)
        await self.sweeper.start()

    def topics_in(self) -> list[str]:
        return [self.topics.run_commands, self.topics.step_results]

    async def handle(self, record: Record) -> None:
        event = decode(record.value, INTERNAL_ADAPTER)
        if isinstance(event, StepResult) and should_fail("drop_step_result", event.thread_id):
            return  # tests: a step result lost on its way
        async with self.db.connection() as conn:
            if isinstance(event, StartRun):
                ids = await start_run(conn, event, self.topics)
            elif isinstance(event, StepResult):
                ids = await on_step_result(conn, event, self.topics, self.settings.lease_ttl_s)
            elif isinstance(event, AbortRun):
                ids = await abort_run(conn, event, self.topics, self.settings.lease_ttl_s)
            elif isinstance(event, ResolveToolCall):
                ids = await resolve_tool_call(conn, event, self.topics, self.settings.lease_ttl_s)
            else:
                log.warning("event not handled by the orchestrator", type=event.type)
                return
        if ids and isinstance(event, StepResult):
            await pause_point("after_step_result_applied", f"{event.thread_id} {event.outcome}")
        await self.outbox.flush(ids)
