"""C24: every service behind a transaction-pooling PgBouncer (``pool_mode=transaction``,
``default_pool_size=2``), 50 concurrent two-step runs (a tool call, then text).

PgBouncer comes from the OS packages (``deploy/native/pgbouncer.sh`` installs and starts it, in
front of the native PostgreSQL); with testcontainers the test is skipped (no native PostgreSQL
port to put it in front of). LISTEN and migrations use the direct DSN (a transaction pooler
cannot carry a session's LISTEN).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.e2e.helpers import collect_run, content, rows, run_row, wait_idle
from threadline.client import ThreadlineClient
from threadline.config import Settings
from threadline.services import NAMES as SERVICES
from threadline.testing import model_script as ms
from threadline.testing.harness import ServiceSet

pytestmark = pytest.mark.serial  # starts a PgBouncer in front of the shared PostgreSQL on a fixed port: runs alone (make test)

ROOT = Path(__file__).resolve().parents[2]
RUNS = 50


def _native_pg_port(cluster) -> int | None:
    script = ROOT / "deploy/native/postgres.sh"
    if subprocess.run(["bash", str(script), "status"], capture_output=True, timeout=30).returncode != 0:
        return None
    return int(cluster.admin_dsn.rsplit(":", 1)[1].split("/")[0])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def bounced(cluster, tmp_path_factory):
    pg_port = _native_pg_port(cluster)
    if pg_port is None:
        pytest.skip("C24 needs the native PostgreSQL to put PgBouncer in front of (testcontainers in use)")
    # beside its PostgreSQL's port (as deploy/native/pgbouncer.sh derives it): parallel checkouts never share it
    pgb_port = int(os.environ.get("THREADLINE_PGBOUNCER_PORT") or pg_port + 1000)
    env_pgb = {**os.environ, "THREADLINE_PGBOUNCER_PORT": str(pgb_port), "THREADLINE_PG_PORT": str(pg_port),
               "THREADLINE_PGBOUNCER_POOL_SIZE": "2"}
    subprocess.run(["bash", str(ROOT / "deploy/native/pgbouncer.sh"), "start"], env=env_pgb, check=True,
                   timeout=600)
    dbname = cluster.dsn.rsplit("/", 1)[1]
    bounced_dsn = f"postgresql://threadline:threadline@127.0.0.1:{pgb_port}/{dbname}"
    prefix = f"{cluster.prefix}-c24"
    # the model server in its own process: 50 subscribers in this process must not starve it
    log_dir = tmp_path_factory.mktemp("c24-logs")
    model_port = _free_port()
    model_log = open(log_dir / "model-server.txt", "ab")  # noqa: SIM115 - closed below
    model_proc = subprocess.Popen([sys.executable, "-m", "threadline.testing.model_server", "--port", str(model_port)],
                                  cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=model_log,
                                  stderr=subprocess.STDOUT)
    script = ms.ModelScript(f"http://127.0.0.1:{model_port}")
    for _ in range(200):
        try:
            script.reset()
            break
        except Exception:  # noqa: BLE001 - not listening yet
            time.sleep(0.1)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "THREADLINE_KAFKA_BOOTSTRAP": cluster.bootstrap,
           "THREADLINE_PG_DSN": bounced_dsn, "THREADLINE_PG_DIRECT_DSN": cluster.dsn,
           "THREADLINE_PG_TRANSACTION_POOLING": "true",
           # two server connections for all four services on a loaded 2-core machine: waits are long
           # (PgBouncer reported ~7 s average), so the bound on a pool wait is raised from 10 s
           "THREADLINE_PG_POOL_TIMEOUT_S": "90", "THREADLINE_TOPIC_PREFIX": prefix,
           "THREADLINE_AGENTS_MODULE": "tests.e2e.agents", "THREADLINE_MODEL_API_BASE": f"http://127.0.0.1:{model_port}/v1",
           "THREADLINE_PARTITIONS": "4", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    svc = ServiceSet(env=env, log_dir=log_dir, cwd=ROOT)
    try:
        for name in SERVICES:
            svc.start(name, f"{name}-c24")
        yield svc, script, Settings(kafka_bootstrap=cluster.bootstrap, pg_dsn=cluster.dsn, topic_prefix=prefix,
                                    partitions=4)
    finally:
        for instance in list(svc.procs):
            svc.stop(instance)
        model_proc.terminate()
        model_proc.wait(20)
        model_log.close()
        subprocess.run(["bash", str(ROOT / "deploy/native/pgbouncer.sh"), "stop"], env=env_pgb, timeout=60)


async def test_c24_fifty_tool_runs_behind_transaction_pooling_pgbouncer(bounced, cluster):
    svc, model, settings = bounced
    tag = uuid.uuid4().hex[:6]
    threads = [f"th-c24-{tag}-{n}" for n in range(RUNS)]
    for n in range(RUNS):
        await model.aqueue([ms.tool_calls(ms.tool_call("lookup_customer", {"customer_id": "C-1001"}, id=f"call-{n}")),
                            ms.text(f"Customer C-1001 is on the pro plan ({n}).")], model=f"threadline-pooled-{n}")

    async with ThreadlineClient(settings) as tl:
        subs = [await tl.subscribe_to_thread("res-c24", t) for t in threads]
        sent = await asyncio.gather(*(
            tl.stream("Is C-1001 on a paid plan?", agent_id="pooled-agent", resource_id="res-c24", thread_id=t,
                      options={"request_context": {"n": n}}) for n, t in enumerate(threads)))
        accepted = await asyncio.gather(*(s.accepted for s in sent))
        chunks = await asyncio.gather(*(collect_run(sub, timeout_s=300) for sub in subs))
        for sub in subs:
            await sub.unsubscribe()

    for n, (acc, run_chunks) in enumerate(zip(accepted, chunks, strict=True)):
        got = content(run_chunks)
        assert [t for t, _ in got if t in ("tool-call", "tool-result", "finish")] == ["tool-call", "tool-result", "finish"], got
        assert got[-1] == ("finish", "stop"), [c for c in got if c[0] in ("error", "tool-error", "finish")]
        assert "".join(p for t, p in got if t == "text-delta") == f"Customer C-1001 is on the pro plan ({n})."
        row = await run_row(cluster.dsn, acc.run_id)
        assert row["status"] == "finished"
    for t in threads:
        assert await wait_idle(cluster.dsn, t, timeout_s=60)
    counts = await rows(cluster.dsn, "SELECT thread_id, count(*) AS n, array_agg(role ORDER BY position) AS roles "
                                     "FROM messages WHERE thread_id = ANY($1::text[]) GROUP BY thread_id", threads)
    assert len(counts) == RUNS
    # the user's message, and one assistant message holding the tool call, its result and the answer
    assert {(r["n"], tuple(r["roles"])) for r in counts} == {(2, ("user", "assistant"))}, counts

    logs = {p.name: p.read_text(errors="replace") for p in svc.log_dir.glob("*.log")}  # the services' logs
    for name, text in logs.items():
        assert "prepared statement" not in text.lower(), name
        assert "InvalidSQLStatementName" not in text and "DuplicatePreparedStatement" not in text, name
    for name in SERVICES:  # the connection factory says how it is configured
        text = logs[f"{name}-c24.log"]
        assert "mode=transaction-pooling" in text and "statement_cache=False" in text, name
    assert all(svc.alive().values())
