"""Run one run_orchestrator instance: ``python -m threadline.services.run_orchestrator``."""

from threadline.service import run

from .service import RunOrchestrator

run(RunOrchestrator)
