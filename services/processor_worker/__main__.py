"""Run one processor_worker instance: ``python -m threadline.services.processor_worker``
or ``threadline-processor-worker``."""

from threadline.service import run

from .service import ProcessorWorker


def main() -> None:
    """The ``threadline-processor-worker`` entry point: run one instance until SIGTERM."""
    run(ProcessorWorker)


if __name__ == "__main__":
    main()
