"""processor-worker: executes steps (processors, the model call through litellm, tools and their
hooks), streams chunks to the thread's chunk topic and reports each step's result."""

from __future__ import annotations

from threadline._internal.faults import should_fail
from threadline.errors import InvalidEventError
from threadline.events import StepTask
from threadline.events.codec import decode
from threadline.events.commands import INTERNAL_ADAPTER
from threadline.flows.orchestration import ABORT_CHANNEL
from threadline.kafka.consumer import Record
from threadline.runtime.model import llm_stream
from threadline.runtime.registry import load_agents, load_catalogue
from threadline.service import Service
from threadline.store.listen import Listener
from threadline.worker import StepExecutor


class ProcessorWorker(Service):
    name = "processor_worker"

    async def setup(self) -> None:
        if self.settings.litellm_noop_callback:
            llm_stream.register_noop_callback()
        agents = load_agents(self.settings.agents_module)
        self.executor = StepExecutor(db=self.db, producer=self.producer, admin=self.admin, outbox=self.outbox,
                                     topics=self.topics, settings=self.settings, agents=agents,
                                     catalogue=load_catalogue(self.settings.agents_module, agents))
        # a step that ends during the drain hands the run to the orchestrator
        self.on_stop(self.executor.stop_continuing, before_drain=True)
        self.aborts = Listener(self.settings.pg_session_dsn, ABORT_CHANNEL, self.executor.on_abort,
                               self.executor.catch_up_aborts, health_s=self.settings.pg_listen_health_s)
        self.on_stop(self.aborts.stop)
        self.on_stop(self.executor.close)  # first, once the steps were drained or handed back
        await self.aborts.start()

    def pool_max(self) -> int:
        """``worker_pg_pool_max``: a worker's steps queue for its connections (decision 92)."""
        return self.settings.worker_pg_pool_max

    def topics_in(self) -> list[str]:
        return [self.topics.step_tasks]

    async def handle(self, record: Record) -> None:
        task = decode(record.value, INTERNAL_ADAPTER)
        if not isinstance(task, StepTask):
            raise InvalidEventError(f"{task.type} does not belong on the step-task topic", code="wrong_topic")
        if should_fail("drop_step_task", task.thread_id):  # tests: a step task lost on its way
            return
        await self.executor.execute(task)
