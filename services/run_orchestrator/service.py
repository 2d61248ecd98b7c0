"""run-orchestrator: the run state machine. Consumes run commands and step results; schedules
steps, ends runs, releases or hands over the thread lease, starts queued turns."""

from __future__ import annotations

from threadline.events import AbortRun, StartRun, StepResult
from threadline.events.codec import decode
from threadline.events.commands import INTERNAL_ADAPTER
from threadline.kafka.consumer import Record
from threadline.logging import get_logger
from threadline.service import Service
from threadline.store.orchestration import abort_run, on_step_result, start_run

log = get_logger(__name__)


class RunOrchestrator(Service):
    name = "run_orchestrator"

    def topics_in(self) -> list[str]:
        return [self.topics.run_commands, self.topics.step_results]

    async def handle(self, record: Record) -> None:
        event = decode(record.value, INTERNAL_ADAPTER)
        async with self.db.connection() as conn:
            if isinstance(event, StartRun):
                ids = await start_run(conn, event, self.topics)
            elif isinstance(event, StepResult):
                ids = await on_step_result(conn, event, self.topics, self.settings.lease_ttl_s)
            elif isinstance(event, AbortRun):
                ids = await abort_run(conn, event, self.topics, self.settings.lease_ttl_s)
            else:
                log.warning("event not handled by the orchestrator", type=event.type)
                return
        await self.outbox.flush(ids)
