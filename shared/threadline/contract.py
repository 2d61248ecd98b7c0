"""The wire contract of Threadline as an AsyncAPI 3.0 document, declared with FastStream.

Every topic Threadline reads or writes is declared here with its message models
(:mod:`threadline.events`): a *receive* operation for each topic a Threadline service consumes
(the records users and services send it), a *send* operation for each topic only others read
(replies, the per-thread chunk streams, dead letters). The broker below is never started: the
services consume with :class:`threadline.kafka.consumer.KeyedConsumer` (one partition's records
of different threads run concurrently, offsets committed only when finished), which FastStream's
subscribers do not do; this module is FastStream's description of that wire.

    faststream docs gen threadline.contract:app --out docs/asyncapi.json   # what `make asyncapi` runs

``tests/unit/test_contract.py`` fails when ``docs/asyncapi.json`` differs from what the code
declares.
"""

from __future__ import annotations

from typing import Any

from faststream import FastStream
from faststream.kafka import KafkaBroker
from faststream.specification import AsyncAPI

from threadline.events import Chunk, DeadLetter, IngressRequest, LifecycleEvent, Reply, RunCommand, StepResult, StepTask
from threadline.topics import Topics

VERSION = "1"
"""The contract's version (the ``info.version`` of the document)."""


def contract_broker(prefix: str = "threadline") -> KafkaBroker:
    """A broker that declares every topic of a cluster whose topics start with ``prefix``."""
    topics = Topics(prefix)
    broker = KafkaBroker("localhost:19092", description="The cluster's Kafka (`THREADLINE_KAFKA_BOOTSTRAP`).")

    @broker.subscriber(topics.ingress, title="ingress", description=(
        "Requests users publish (send_message, queue_message, send_signal, send_state_signal, "
        "send_notification_signal, stream, generate, abort), keyed `resource:thread`; consumed by ingress."))
    async def ingress(request: IngressRequest) -> None:
        """Declared only."""

    @broker.subscriber(topics.run_commands, title="run-commands", description=(
        "Run starts, aborts and step results for the run-orchestrator, keyed by thread (internal)."))
    async def run_commands(command: RunCommand) -> None:
        """Declared only."""

    @broker.subscriber(topics.step_results, title="step-results", description=(
        "Finished steps, from processor-workers to the run-orchestrator, keyed by thread (internal)."))
    async def step_results(result: StepResult) -> None:
        """Declared only."""

    @broker.subscriber(topics.step_tasks, title="step-tasks", description=(
        "Steps to execute, from the run-orchestrator to processor-workers, keyed by thread (internal)."))
    async def step_tasks(task: StepTask) -> None:
        """Declared only."""

    @broker.subscriber(topics.lifecycle, title="lifecycle", description=(
        "Run and thread lifecycle events, keyed by thread; consumed by the notification-scheduler, "
        "readable by anyone."))
    async def lifecycle(event: LifecycleEvent) -> None:
        """Declared only."""

    broker.publisher(topics.replies, title="replies", schema=Reply, description=(
        "Answers to ingress requests (accepted, persisted, error, run result, aborted, skipped, "
        "notified), keyed by request id; a request's `reply_to` may name another topic."))
    broker.publisher(f"{prefix}.chunks.{{resource}}.{{thread}}.{{hash}}", title="chunks", schema=Chunk,
                     description=(
        "One topic per thread: the stream of its runs (Mastra chunks stamped with runId, step, "
        "attempt and seq), one partition (the per-thread chunk layout, the default). The name is "
        "`Topics.thread_chunks(resource_id, thread_id)`: "
        "the ids with characters outside [a-zA-Z0-9_-] replaced by `_`, then the first 12 hex "
        "digits of the SHA-256 of `resource:thread`."))
    broker.publisher(topics.shared_chunks, title="chunks-shared", schema=Chunk, description=(
        "The shared chunk layout (`THREADLINE_CHUNK_LAYOUT=shared`): every thread's chunks on one topic of "
        "`THREADLINE_CHUNK_PARTITIONS` partitions, keyed `resource:thread`; a thread's chunks are on the "
        "partition Kafka's default partitioner gives its key, in order. A reader keeps the records of its key."))
    broker.publisher(topics.dead_letters, title="dead-letters", schema=DeadLetter, description=(
        "Records a service could not handle, whole, with the reason."))
    return broker


def specification(prefix: str = "threadline", broker: KafkaBroker | None = None) -> AsyncAPI:
    """The AsyncAPI 3.0 description of ``broker`` (default: :func:`contract_broker`)."""
    return AsyncAPI(broker or contract_broker(prefix), title="Threadline", version=VERSION, description=(
        "A distributed runtime for AI agents: Mastra's agent model as services over Kafka and "
        "PostgreSQL. Records are JSON; the event type is in `type`, the schema version in `v`."))


def document(prefix: str = "threadline") -> dict[str, Any]:
    """The AsyncAPI document as JSON-ready data."""
    return dict(specification(prefix).to_specification().to_jsonable())


_broker = contract_broker()
app = FastStream(_broker, specification=specification(broker=_broker))
"""For ``faststream docs gen threadline.contract:app`` / ``faststream docs serve``."""
