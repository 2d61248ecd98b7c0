"""A worker's pool is larger than the other services' (decision 92): its steps queue for
connections, and a burst of claims through 7 of them waited seconds."""

from __future__ import annotations

from services.ingress.service import Ingress
from services.processor_worker.service import ProcessorWorker
from services.run_orchestrator.service import RunOrchestrator
from threadline.config import Settings


def test_a_worker_pools_30_connections_the_other_services_10() -> None:
    settings = Settings()
    assert ProcessorWorker(settings).db.max_size == 30
    assert Ingress(settings).db.max_size == 10
    assert RunOrchestrator(settings).db.max_size == 10


def test_each_pool_follows_its_own_setting() -> None:
    settings = Settings(pg_pool_max=12, worker_pg_pool_max=40)
    assert ProcessorWorker(settings).db.max_size == 40
    assert Ingress(settings).db.max_size == 12
