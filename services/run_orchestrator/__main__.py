"""Run one run_orchestrator instance: ``python -m threadline.services.run_orchestrator``
or ``threadline-run-orchestrator``."""

from threadline.service import run

from .service import RunOrchestrator


def main() -> None:
    """The ``threadline-run-orchestrator`` entry point: run one instance until SIGTERM."""
    run(RunOrchestrator)


if __name__ == "__main__":
    main()
