"""Helpers for end-to-end tests: collect a run's chunks, read stored rows."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import orjson

from threadline.client import ThreadSubscription


async def collect_run(sub: ThreadSubscription, *, timeout_s: float = 30.0, runs: int = 1) -> list[dict[str, Any]]:
    """Chunks until ``runs`` finish chunks have been seen."""
    return [chunk for _, chunk in await collect_timed(sub, runs=runs, timeout_s=timeout_s)]


USER_AUTHORED = "(role = 'user' OR (role = 'signal' AND content->'metadata'->'signal'->>'type' = 'user'))"
"""SQL: a stored message the user wrote: the call's own message (role ``user``) or a message sent
with ``sendMessage`` / ``queueMessage`` (role ``signal`` of type ``user``, as Mastra stores it)."""


async def rows(dsn: str, query: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.set_type_codec("jsonb", encoder=lambda v: orjson.dumps(v).decode(), decoder=orjson.loads, schema="pg_catalog",
                                  format="text")
        return await conn.fetch(query, *args)
    finally:
        await conn.close()


async def run_stream(settings: Any, agent: str, text: str, *, thread: str | None = None, resource: str = "res-1",
                     options: dict[str, Any] | None = None, timeout_s: float = 60.0) -> tuple[str, list[dict[str, Any]]]:
    """Publish a ``stream`` request on a fresh (or given) thread; return (run id, its chunks)."""
    import uuid

    from threadline.client import ThreadlineClient

    thread = thread or f"th-{uuid.uuid4().hex[:8]}"
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread(resource, thread)
        sent = await tl.stream(text, agent_id=agent, resource_id=resource, thread_id=thread, options=options)
        accepted = await sent.accepted
        chunks = await collect_run(sub, timeout_s=timeout_s)
        await sub.unsubscribe()
    return accepted.run_id, chunks


async def run_row(dsn: str, run_id: str, *, settle_s: float = 10.0) -> asyncpg.Record:
    """The run's row once its status is terminal (the worker writes it right after ``finish``)."""
    deadline = asyncio.get_running_loop().time() + settle_s
    while True:
        row = (await rows(dsn, "SELECT * FROM runs WHERE run_id = $1", run_id))[0]
        if row["status"] != "running" or asyncio.get_running_loop().time() > deadline:
            return row
        await asyncio.sleep(0.1)


def content(chunks: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """The chunks that carry content, as (type, essence): text, tools, data, tripwire, error, finish."""
    out = []
    for c in chunks:
        t, p = c["type"], c.get("payload") or {}
        if t == "text-delta":
            out.append((t, p["text"]))
        elif t in ("tool-call", "tool-result", "tool-error", "tripwire", "error", "attempt-discarded"):
            out.append((t, p))
        elif t.startswith("data-") and t not in ("data-user-message", "data-signal"):
            out.append((t, c.get("data")))
        elif t == "finish":
            out.append((t, p.get("stepResult", {}).get("reason")))
    return out


async def wait_idle(dsn: str, thread_id: str, timeout_s: float = 10.0) -> bool:
    """True once the thread's lease is free (the orchestrator ends a run just after its worker)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        lease = await rows(dsn, "SELECT run_id FROM thread_leases WHERE thread_id = $1", thread_id)
        if lease and lease[0]["run_id"] is None:
            return True
        await asyncio.sleep(0.1)
    return False


async def execute(dsn: str, sql: str, *args: Any) -> None:
    """Run one statement (test setup)."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql, *args)
    finally:
        await conn.close()


async def explain_run(dsn: str, run_id: str, logs: Sequence[Path] = ()) -> str:
    """Why a run did not end, for an assertion message: its row, its thread's outbox rows, every
    unpublished outbox row (the relays' backlog), its recoveries, and the Threadline lines (not
    the Kafka client's) at the end of each log in ``logs`` (paths)."""
    from threadline.topics import thread_key

    run = (await rows(dsn, "SELECT run_id, status, step, steps_done, attempt, epoch, step_owner, updated_at, "
                           "step_heartbeat, resource_id, thread_id FROM runs WHERE run_id = $1", run_id))
    out = [f"run: {dict(run[0]) if run else None}"]
    if run:
        key = thread_key(run[0]["resource_id"], run[0]["thread_id"])
        out += ["thread's outbox rows:"] + [f"  {dict(r)}" for r in await rows(
            dsn, "SELECT id, topic, created_at, published_at FROM outbox WHERE key = $1 ORDER BY id", key)]
    out += ["unpublished outbox rows (all threads):"] + [f"  {dict(r)}" for r in await rows(
        dsn, "SELECT topic, count(*) AS n, min(created_at) AS oldest FROM outbox WHERE published_at IS NULL "
             "GROUP BY topic ORDER BY 3")]
    out += ["recoveries:"] + [f"  {dict(r)}" for r in await rows(
        dsn, "SELECT * FROM run_recoveries WHERE run_id = $1 ORDER BY 1", run_id)]
    for path in logs:
        lines = [ln for ln in Path(path).read_text(errors="replace").splitlines() if "[threadline" in ln]
        out += [f"--- {Path(path).name} (last 40 Threadline lines)"] + [ln[:400] for ln in lines[-40:]]
    return "\n".join(out)


def kept_chunks(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chunks a subscriber keeps once every dead attempt is known: an ``attempt-discarded
    {step, attempt}`` kills that attempt and the earlier ones of the run's step, whenever it arrives
    (a live subscriber has already shown what came before it)."""
    dead: dict[tuple[str, int], int] = {}
    for c in chunks:
        if c["type"] == "attempt-discarded":
            key = (c["runId"], c["payload"]["step"])
            dead[key] = max(dead.get(key, -1), c["payload"]["attempt"])
    return [c for c in chunks if c["type"] == "attempt-discarded"
            or c["attempt"] > dead.get((c["runId"], c["step"]), -1)]


@contextlib.contextmanager
def own_instances(services: Any, service: str, default: str, *, kill: bool = False) -> Iterator[list[str]]:
    """Stop the session's ``default`` instance of ``service`` for a test that runs its own.

    The test appends every instance it starts to the yielded list; on exit each one still
    running is thawed and stopped (``kill=True``: ``kill -9``, for one that may be mid-step),
    and ``default`` is started again unless the test already did.
    """
    services.stop(default)
    started: list[str] = []
    try:
        yield started
    finally:
        for instance in started:
            if instance in services.procs:
                services.thaw(instance)
                services.kill(instance) if kill else services.stop(instance)
        if default not in services.procs:
            services.start(service, default)


@contextlib.contextmanager
def swapped_service(services: Any, name: str, tag: str, *, kill: bool = False, **env: str) -> Iterator[str]:
    """The session's ``<name>-1`` replaced by ``<name>-<tag>`` started with ``env`` (a pause or
    fault point, another setting); yields the instance's name.

    The test may kill the instance or start ``<name>-1`` again itself; on exit the instance is
    stopped if it still runs (``kill=True``: ``kill -9``, for one that may be held at a pause
    point), and ``<name>-1`` is started again unless the test already did.
    """
    services.stop(f"{name}-1")
    instance = f"{name}-{tag}"
    services.start(name, instance, **env)
    try:
        yield instance
    finally:
        if instance in services.procs:
            services.kill(instance) if kill else services.stop(instance)
        if f"{name}-1" not in services.procs:
            services.start(name, f"{name}-1")


WORKERS = ("processor_worker-1", "processor_worker-2")
"""The session's worker and the second one :func:`second_worker` starts beside it."""


@contextlib.contextmanager
def second_worker(services: Any) -> Iterator[tuple[str, str]]:
    """Run ``processor_worker-2`` beside the session's ``processor_worker-1``; yields both names.

    The test may kill or stop either; on exit ``processor_worker-2`` is stopped if it still runs
    and ``processor_worker-1`` is started again if it no longer does.
    """
    services.start("processor_worker", WORKERS[1])
    try:
        yield WORKERS
    finally:
        if WORKERS[1] in services.procs:
            services.stop(WORKERS[1])
        if WORKERS[0] not in services.procs:
            services.start("processor_worker", WORKERS[0])


def worker_of(services: Any, thread_id: str, names: Sequence[str] = WORKERS) -> str | None:
    """The first of ``names`` whose log names ``thread_id`` (the worker that took its step), or None."""
    return next((n for n in names if f"thread_id={thread_id}" in (services.log_dir / f"{n}.log").read_text()),
                None)


async def start_and_read_until(tl: Any, thread_id: str, until: Any, *, text: str = "go", agent_id: str = "chaos",
                               resource_id: str = "res-1") -> tuple[ThreadSubscription, str, list[dict[str, Any]]]:
    """Subscribe to ``thread_id``, start a run there with ``text`` and read chunks until ``until(chunk)``.

    Returns the subscription (still open), the run id and the chunks read, the matching one last.
    """
    sub = await tl.subscribe_to_thread(resource_id, thread_id)
    run_id = (await (await tl.stream(text, agent_id=agent_id, resource_id=resource_id,
                                     thread_id=thread_id)).accepted).run_id
    chunks: list[dict[str, Any]] = []
    async for chunk in sub.stream:
        chunks.append(chunk)
        if until(chunk):
            break
    return sub, run_id, chunks


SERVICE_NAMES = ("ingress", "run_orchestrator", "processor_worker", "notification_scheduler")


@contextlib.contextmanager
def own_services(services: Any, tag: str, env_of: Any = None, **env: str) -> Iterator[None]:
    """Replace the session's instance of every service by ``<name>-<tag>`` started with ``env``
    (and ``env_of(name)``, a dict, when given); on exit the session's instances come back."""
    with contextlib.ExitStack() as stack:
        for name in SERVICE_NAMES:
            started = stack.enter_context(own_instances(services, name, f"{name}-1"))
            services.start(name, f"{name}-{tag}", **env, **(env_of(name) if env_of else {}))
            started.append(f"{name}-{tag}")
        yield


def switch_chunk_layout(services: Any, settings: Any, layout: str) -> None:
    """Run the session in the chunk ``layout`` from now on (docs/decisions.md#shared-chunk-layout):
    stop every running instance (services and gateway), then start each again with
    ``THREADLINE_CHUNK_LAYOUT=layout``; the session's ``settings`` and this process's environment
    (what CLI subprocesses inherit) name it too. No two layouts run at once. Nothing when the
    session is in that layout already."""
    if settings.chunk_layout == layout:
        return
    running = list(services.procs)
    for instance in running:
        services.stop(instance)
    services.env["THREADLINE_CHUNK_LAYOUT"] = os.environ["THREADLINE_CHUNK_LAYOUT"] = layout
    settings.chunk_layout = layout
    for instance in running:
        services.start_again(instance)


async def collect_timed(sub: ThreadSubscription, *, runs: int = 1,
                        timeout_s: float = 60.0) -> list[tuple[float, dict[str, Any]]]:
    """``(arrival time.monotonic(), chunk)`` until ``runs`` finish chunks have been seen."""
    out: list[tuple[float, dict[str, Any]]] = []

    async def pump() -> None:
        finished = 0
        async for chunk in sub.stream:
            out.append((time.monotonic(), chunk))
            finished += chunk["type"] == "finish"
            if finished == runs:
                return

    try:
        await asyncio.wait_for(pump(), timeout_s)
    except TimeoutError:
        raise AssertionError(f"run did not finish in {timeout_s}s; got {[c['type'] for _, c in out]}") from None
    return out


async def one_tool_run(tl: Any, model: Any, *, agent: str, prefix: str, tool: str, tag: str,
                       args: dict[str, Any] | None = None, timeout_s: float = 60.0) -> dict[str, Any]:
    """One run of ``agent`` (whose steps ask ``threadline-<prefix>-<thread>-s<step>``, the
    ``PerStepModel`` of tests/e2e/agents/crashes.py) on a thread of its own: step 0 calls ``tool``,
    step 1 answers "ok". Returns ``{tool, thread, call, run_id, timed, chunks}``."""
    from threadline.testing import model_script as ms

    thread, call = f"th-{prefix}-{tool}-{tag}", f"c-{tool}-{tag}"
    await model.aqueue([ms.tool_calls(ms.tool_call(tool, args or {}, id=call))], model=f"threadline-{prefix}-{thread}-s0")
    await model.aqueue([ms.text("ok")], model=f"threadline-{prefix}-{thread}-s1")
    sub = await tl.subscribe_to_thread("res-1", thread)
    run_id = (await (await tl.stream(f"call {tool}", agent_id=agent, resource_id="res-1",
                                     thread_id=thread)).accepted).run_id
    timed = await collect_timed(sub, timeout_s=timeout_s)
    await sub.unsubscribe()
    return {"tool": tool, "thread": thread, "call": call, "run_id": run_id, "timed": timed,
            "chunks": [c for _, c in timed]}


def own_cluster_env(*, bootstrap: str, dsn: str, prefix: str, replication_factor: int,
                    api_base: str) -> dict[str, str]:
    """The environment of services a test runs on a Kafka cluster of its own (``bootstrap``), with
    its own database (``dsn``) and topic ``prefix``: the e2e agents, the session's fake model server
    (``api_base``), 4 partitions of ``replication_factor`` replicas, quick model retries."""
    return {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
            "THREADLINE_KAFKA_BOOTSTRAP": bootstrap, "THREADLINE_PG_DSN": dsn, "THREADLINE_TOPIC_PREFIX": prefix,
            "THREADLINE_REPLICATION_FACTOR": str(replication_factor), "THREADLINE_PARTITIONS": "4",
            "THREADLINE_AGENTS_MODULE": "tests.e2e.agents", "THREADLINE_MODEL_API_BASE": api_base,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True", "THREADLINE_MODEL_RETRY_INITIAL_S": "0.05",
            "THREADLINE_MODEL_RETRY_MAX_WAIT_S": "5"}
