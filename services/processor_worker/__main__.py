"""Run one processor_worker instance: ``python -m threadline.services.processor_worker``."""

from threadline.service import run

from .service import ProcessorWorker

run(ProcessorWorker)
