"""The metrics every service records, in one Prometheus registry per process.

Recording is a counter or histogram update in memory (about a microsecond); nothing is sent
anywhere unless ``/metrics`` is scraped (:mod:`threadline.ops.server`). Series read from live
objects at scrape time (consumer lag, pool use) are added by :class:`ServiceCollector`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

REGISTRY = CollectorRegistry()
"""The process's registry (not the library's global one: nothing else registers here)."""

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

STEPS_IN_FLIGHT = Gauge("threadline_steps_in_flight", "Steps this worker is executing now.", registry=REGISTRY)
STEP_SECONDS = Histogram("threadline_step_seconds", "Duration of one step attempt in the worker, by outcome.",
                         ["outcome"], buckets=_LATENCY, registry=REGISTRY)
FIRST_CHUNK_SECONDS = Histogram("threadline_time_to_first_chunk_seconds",
                                "From a step's claim to its first chunk handed to Kafka.",
                                buckets=_LATENCY, registry=REGISTRY)
CHUNKS = Counter("threadline_chunks", "Chunks published on thread chunk topics.", registry=REGISTRY)
MODEL_CALL_SECONDS = Histogram("threadline_model_call_seconds", "Duration of one model call (one try), by outcome.",
                               ["outcome"], buckets=_LATENCY, registry=REGISTRY)
MODEL_ERRORS = Counter("threadline_model_errors", "Failed model calls (one try), by error kind.", ["kind"],
                       registry=REGISTRY)
RETRIES = Counter("threadline_retries", "Handlings of a record retried after a transient fault, by exception.",
                  ["reason"], registry=REGISTRY)
DEAD_LETTERS = Counter("threadline_dead_letters", "Records dead-lettered, by code.", ["code"], registry=REGISTRY)
PG_ACQUIRE_SECONDS = Histogram("threadline_pg_pool_acquire_seconds", "Wait for a pooled PostgreSQL connection.",
                               buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0),
                               registry=REGISTRY)


class Lagging(Protocol):
    """What :class:`ServiceCollector` reads from a consumer."""

    group_id: str

    def lag(self) -> dict[tuple[str, int], int]: ...

    @property
    def in_flight(self) -> int: ...


class Pooled(Protocol):
    """What :class:`ServiceCollector` reads from a database pool."""

    acquire_timeouts: int

    def pool_sizes(self) -> tuple[int, int, int] | None: ...


class ServiceCollector(Collector):
    """Series read at scrape time: consumer lag per group/topic/partition, records in flight,
    the PostgreSQL pool's size, use and acquire timeouts.

    Args:
        service: the service name (a label of every series here).
        consumer: ``() -> Lagging | None`` (``None`` before the consumer exists).
        db: the service's pool.
    """

    def __init__(self, service: str, consumer: Callable[[], Lagging | None], db: Pooled) -> None:
        self._service = service
        self._consumer = consumer
        self._db = db

    def collect(self) -> Iterator[Any]:
        consumer = self._consumer()
        lag = GaugeMetricFamily("threadline_consumer_lag", "Records not yet committed, per partition "
                                "(high watermark minus committed offset).", labels=["group", "topic", "partition"])
        flight = GaugeMetricFamily("threadline_records_in_flight", "Records taken from Kafka and not yet "
                                   "finished.", labels=["service"])
        if consumer is not None:
            for (topic, partition), n in sorted(consumer.lag().items()):
                lag.add_metric([consumer.group_id, topic, str(partition)], n)
            flight.add_metric([self._service], consumer.in_flight)
        yield lag
        yield flight
        size = GaugeMetricFamily("threadline_pg_pool_connections", "PostgreSQL pool connections by state.",
                                 labels=["state"])
        sizes = self._db.pool_sizes()
        if sizes is not None:
            opened, idle, most = sizes
            size.add_metric(["open"], opened)
            size.add_metric(["in_use"], opened - idle)
            size.add_metric(["max"], most)
        yield size
        timeouts = CounterMetricFamily("threadline_pg_pool_acquire_timeouts", "Waits for a pooled connection "
                                       "that outlived the acquire timeout.")
        timeouts.add_metric([], self._db.acquire_timeouts)
        yield timeouts
