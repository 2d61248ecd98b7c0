"""The benchmarks' own Threadline: the local cluster (started with ``make infra-up`` if it is
not running, never stopped), a private database and topic prefix, the fake model server in its
own process, the four services as processes, a client and a many-thread chunk subscriber.
Everything started here is stopped in :meth:`BenchEnv.stop`, and the prefix's topics deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import uuid
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient

from bench.subscriber import ChunkSubscriber
from threadline.client import ThreadlineClient
from threadline.config import Settings
from threadline.kafka.admin import TopicAdmin
from threadline.store.migrate import migrate
from threadline.testing.harness import (
    ModelServerProcess,
    ServiceSet,
    create_database,
    drop_database,
    ensure_native_cluster,
)
from threadline.testing.model_script import ModelScript
from threadline.topics import Topics

ROOT = Path(__file__).resolve().parent.parent
WORKER = "processor_worker"
SETTLE_LIMIT_S = 90.0
"""Longest wait for the broker to finish deleting an earlier bench's topics (:func:`broker_settled`)."""


def pending_deletions(data_dir: Path) -> int:
    """Partition directories the native broker has marked for deletion (``<topic>-<n>.<id>-delete``
    in its log directory); 0 when the directory is not there (another broker)."""
    try:
        return sum(1 for p in data_dir.iterdir() if p.name.endswith("-delete"))
    except OSError:
        return 0


async def broker_settled(data_dir: Path | None = None, *, limit_s: float = SETTLE_LIMIT_S) -> float:
    """Wait until the native broker has removed the partitions of deleted topics, at most
    ``limit_s``; returns the seconds waited.

    Kafka removes a deleted topic's files ``file.delete.delay.ms`` (60 s) after the deletion.
    A bench started within that minute of another (A/B runs back to back) would otherwise share
    the broker with the removal of the earlier run's hundreds of partitions: the burst figure's
    broker CPU per run measured 26-28 ms after a pause and 58-71 ms right after another run
    (docs/benchmarks.md, "Latest run")."""
    data_dir = data_dir or Path(os.environ.get("THREADLINE_RUN_DIR", ROOT / ".run")) / "kafka" / "data"
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    pending = pending_deletions(data_dir)
    if pending:
        print(f"waiting for the broker to remove {pending} deleted partitions (at most {limit_s:.0f} s)", flush=True)
    while pending and loop.time() - t0 < limit_s:
        await asyncio.sleep(1.0)
        pending = pending_deletions(data_dir)
    return loop.time() - t0


class BenchEnv:
    """Start with ``await env.start()``; always ``await env.stop()``."""

    def __init__(self, *, partitions: int = 6, log_dir: Path | None = None,
                 extra_env: dict[str, str] | None = None) -> None:
        self.partitions = partitions
        self.extra_env = extra_env or {}
        self.tag = uuid.uuid4().hex[:10]
        self.prefix = f"tlbench-{self.tag}"
        self.dbname = f"tl_bench_{self.tag}"
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix=f"threadline-bench-{self.tag}-"))
        self.topics = Topics(self.prefix)
        self.model = ModelServerProcess(log_path=self.log_dir / "model_server.log")
        self.services: ServiceSet | None = None
        self.client: ThreadlineClient | None = None
        self.subscriber: ChunkSubscriber | None = None
        self.admin: TopicAdmin | None = None
        self.script: ModelScript | None = None
        self._admin_dsn = ""
        self.bootstrap = ""
        self.workers: list[str] = []
        self.settle_s = 0.0
        """Seconds the start waited for the broker to remove an earlier bench's deleted topics."""

    async def start(self) -> None:
        if {**os.environ, **self.extra_env}.get("THREADLINE_CHUNK_LAYOUT", "per-thread") != "per-thread":
            # its raw subscribers read per-thread chunk topics: in the shared layout they would read nothing
            raise SystemExit("the benchmark reads per-thread chunk topics; THREADLINE_CHUNK_LAYOUT=shared is not "
                             "measured yet (docs/decisions.md#shared-chunk-layout)")
        cluster = await asyncio.to_thread(ensure_native_cluster, ROOT)
        self.bootstrap, self._admin_dsn = cluster.bootstrap, cluster.admin_dsn
        self.settle_s = round(await broker_settled(), 1)
        dsn = await create_database(cluster.admin_dsn, self.dbname)
        await asyncio.to_thread(migrate, dsn)
        await asyncio.to_thread(self.model.start)
        self.script = ModelScript(self.model.url)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "THREADLINE_KAFKA_BOOTSTRAP": self.bootstrap,
               "THREADLINE_PG_DSN": dsn, "THREADLINE_TOPIC_PREFIX": self.prefix,
               "THREADLINE_AGENTS_MODULE": "bench.agents", "THREADLINE_MODEL_API_BASE": self.model.api_base,
               "THREADLINE_PARTITIONS": str(self.partitions), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
               **self.extra_env}
        self.services = ServiceSet(env=env, log_dir=self.log_dir, cwd=ROOT, fork=False)
        await asyncio.to_thread(self.services.start_all)
        self.workers = [f"{WORKER}-1"]
        settings = Settings(kafka_bootstrap=self.bootstrap, pg_dsn=dsn, topic_prefix=self.prefix,
                            partitions=self.partitions, reply_timeout_s=60)
        self.client = ThreadlineClient(settings)
        await self.client.start()
        self.admin = TopicAdmin(self.bootstrap)
        await self.admin.start()
        self.subscriber = ChunkSubscriber(self.bootstrap)
        await self.subscriber.start()

    async def set_workers(self, n: int) -> None:
        """Restart the processor-workers as ``n`` fresh instances (clean RSS, warm after one run)."""
        assert self.services is not None
        for name in self.workers:
            await asyncio.to_thread(self.services.stop, name)
        self.workers = [f"{WORKER}-{i + 1}" for i in range(n)]
        for name in self.workers:
            await asyncio.to_thread(self.services.start, WORKER, name)
        last = self.log_dir / f"{self.workers[-1]}.log"  # the last to join ends the rebalance
        for _ in range(600):
            if b"partitions assigned" in last.read_bytes():
                break
            await asyncio.sleep(0.1)

    @property
    def dsn(self) -> str:
        """The bench database's DSN (after :meth:`start`)."""
        return self._admin_dsn.rsplit("/", 1)[0] + "/" + self.dbname

    def worker_pids(self) -> list[int]:
        assert self.services is not None
        return [self.services.pid(w) for w in self.workers]

    def pid(self, instance: str) -> int:
        assert self.services is not None
        return self.services.pid(instance)

    async def chunk_topics(self, threads: list[tuple[str, str]]) -> list[str]:
        """Create the chunk topics of ``(resource, thread)`` pairs in one request; subscribe to them."""
        assert self.admin is not None and self.subscriber is not None
        names = [self.topics.chunks(r, t) for r, t in threads]
        for i in range(0, len(names), 200):
            await self.admin.ensure(names[i:i + 200], partitions=1)
        await self.subscriber.watch(names)
        return names

    async def stop(self) -> None:
        for closer in (self.subscriber and self.subscriber.stop, self.client and self.client.stop,
                       self.admin and self.admin.stop):
            if closer is not None:
                with contextlib.suppress(Exception):
                    await closer()
        if self.services is not None:
            await asyncio.to_thread(self.services.stop_all)
        await asyncio.to_thread(self.model.stop)
        if self._admin_dsn:
            with contextlib.suppress(Exception):
                await drop_database(self._admin_dsn, self.dbname)
        if self.bootstrap:
            with contextlib.suppress(Exception):
                await delete_topics(self.bootstrap, self.prefix + ".")


async def delete_topics(bootstrap: str, prefix: str) -> int:
    """Delete every topic whose name starts with ``prefix``; returns how many."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        names = [t for t in await admin.list_topics() if t.startswith(prefix)]
        for i in range(0, len(names), 200):
            await admin.delete_topics(names[i:i + 200])
        return len(names)
    finally:
        await admin.close()
