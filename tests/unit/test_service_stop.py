"""A service stops what it started and nothing else: a start that fails before ``setup`` (the
broker or PostgreSQL away, a bad setting) still stops cleanly, and the parts ``setup`` registers
with ``Service.on_stop`` stop in their order around the drain. Before, the processor worker's
``stop`` called ``self.executor.close()`` after guarding ``executor`` only once, and raised
``AttributeError`` when ``setup`` had not run; the notification scheduler's probed nothing."""

from __future__ import annotations

import pytest

from services.ingress.service import Ingress
from services.notification_scheduler.service import NotificationScheduler
from services.processor_worker.service import ProcessorWorker
from services.run_orchestrator.service import RunOrchestrator
from threadline.config import Settings
from threadline.kafka.consumer import Record
from threadline.service import Service


@pytest.mark.parametrize("service_cls", [ProcessorWorker, RunOrchestrator, NotificationScheduler, Ingress])
async def test_a_service_whose_start_failed_before_setup_stops_without_error(service_cls: type[Service]) -> None:
    service = service_cls(Settings())
    await service.stop()  # nothing was started: no setup attribute is read


class _Recorder(Service):
    """A service whose ``setup`` registered three parts; the drain and the close are recorded."""

    name = "recorder"

    def __init__(self) -> None:
        super().__init__(Settings())
        self.calls: list[str] = []
        real_db_stop = self.db.stop

        async def db_stop() -> None:  # the last shared resource the stop closes
            self.calls.append("db closed")
            await real_db_stop()

        self.db.stop = db_stop  # type: ignore[method-assign]  # records when the shared resources close

    def topics_in(self) -> list[str]:
        return []

    async def handle(self, record: Record) -> None:
        raise NotImplementedError

    async def setup(self) -> None:
        self.on_stop(lambda: self.calls.append("listener stopped"), before_drain=True)
        self.on_stop(self._failing_stop, before_drain=True)
        self.on_stop(lambda: self.calls.append("ticker cancelled"), before_drain=True)
        self.on_stop(self._close_executor)

    async def _failing_stop(self) -> None:
        self.calls.append("failing stop")
        raise RuntimeError("a part that cannot stop")

    async def _close_executor(self) -> None:
        self.calls.append("executor closed")


async def test_registered_parts_stop_last_first_around_the_drain_and_a_failure_stops_no_other() -> None:
    service = _Recorder()
    await service.setup()
    await service.stop()
    assert service.calls == ["ticker cancelled", "failing stop", "listener stopped", "db closed", "executor closed"]
    await service.stop()  # a second stop stops nothing twice
    assert service.calls.count("executor closed") == 1
