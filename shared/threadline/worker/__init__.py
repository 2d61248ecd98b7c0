"""The processor-worker's machinery around the step loop: claiming a step task (and taking a
step over from a dead worker), keeping steps alive, stopping aborted runs, and plugging
PostgreSQL and Kafka into the loop's ports."""

from threadline.worker.executor import StepExecutor
from threadline.worker.keepalive import KeepAlive

__all__ = ["KeepAlive", "StepExecutor"]
