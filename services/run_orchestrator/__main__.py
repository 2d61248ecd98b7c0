from services.run_orchestrator.service import RunOrchestrator
from threadline.service import run

run(RunOrchestrator)
