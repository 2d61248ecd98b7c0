"""D06 (cases-3) (b) and (c) against a gateway started with ``ulimit -n 256`` (the development
machine's figures): 500 SSE viewers open over 10 threads within 10 s while another caller posts a
message and reads ``…/runs`` every 0.5 s. Every viewer either streams or is answered within 2 s
with 503 ``at_capacity`` and ``Retry-After``; none waits longer than 5 s, none gets a 500; the
gateway never logs "Too many open files" and never exits; the writes and reads answer 2xx
within 1 s; the stream limit in force is on ``/metrics``. Then 90 % of the viewers close, and
5 s later a new viewer is served (decision 223: a gateway serves at most half the descriptors
left at its start as streams).

(a), slow readers beside normal ones, is decision 176's (tests/integration/test_fanout_reader.py,
tests/e2e/test_gateway_fanout.py)."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx

from tests.e2e.gateway_http import TENANT_A, GatewayInfo, thread_path
from threadline.testing.containers import free_port

NOFILE, VIEWERS, THREADS, OPEN_S = 256, 500, 10, 10.0
ROOT = Path(__file__).resolve().parents[2]


def _start_gateway(services, info: GatewayInfo, metrics_port: int, log_path: Path) -> subprocess.Popen[bytes]:
    """The gateway as its own process under ``ulimit -n 256`` (soft and hard)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))

    env = {**services.env, **info.env(), "THREADLINE_METRICS_PORT": str(metrics_port),
           "THREADLINE_INSTANCE_ID": "gateway-d06"}
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "threadline.services.gateway"], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT, preexec_fn=limit)
    deadline = time.monotonic() + 90
    while b"service started" not in log_path.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("gateway-d06 did not start:\n" + log_path.read_text()[-3000:])
        time.sleep(0.1)
    return proc


class _Viewer:
    """One raw SSE viewer: its answer's status, ``Retry-After`` and time; the socket kept open
    while it streams."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.retry_after: str | None = None
        self.code = b""
        self.took = 0.0
        self.writer: asyncio.StreamWriter | None = None

    async def open(self, info: GatewayInfo, path: str) -> None:
        began = time.monotonic()
        reader, writer = await asyncio.open_connection("127.0.0.1", info.port)
        self.writer = writer  # closed by close(), whatever happens next
        writer.write((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {info.key_a}\r\n"
                      "Accept: text/event-stream\r\n\r\n").encode())
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        self.status = int(head.split(b" ", 2)[1])
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"retry-after:"):
                self.retry_after = line.split(b":", 1)[1].strip().decode()
        if self.status == 200:
            got = b""
            while b"event: subscribed" not in got:  # it streams: positioned and told so
                part = await reader.read(4096)
                assert part, got
                got += part
        else:
            self.code = await reader.read(4096)
            self.close()
        self.took = time.monotonic() - began

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


async def _metric(metrics: httpx.AsyncClient, name: str) -> float:
    text = (await metrics.get("/metrics")).text
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith(f"{name} ")))


async def test_d06_many_viewers_are_served_or_refused_cleanly_and_the_rest_keeps_answering(services, model, tmp_path):
    info, metrics_port = GatewayInfo.make(free_port()), free_port()
    log_path = tmp_path / "gateway-d06.log"
    proc = await asyncio.to_thread(_start_gateway, services, info, metrics_port, log_path)
    viewers: list[_Viewer] = []
    try:
        tag = uuid.uuid4().hex[:8]
        paths = [thread_path(TENANT_A, f"d06-{tag}-{i}") for i in range(THREADS)]
        async with info.client(info.key_a) as http, \
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{metrics_port}", timeout=10) as metrics:
            model.queue([{"text": "made"}] * THREADS, model="threadline-gateway")
            for path in paths:  # the threads and their chunk topics exist
                r = await http.post(f"{path}/generate", json={"message": "hi", "agent_id": "gateway"})
                assert r.status_code == 200, r.text

            calls: list[tuple[str, int, float]] = []
            done = asyncio.Event()

            async def other_caller() -> None:
                n = 0
                while not done.is_set():
                    for method, tail in (("POST", "messages"), ("GET", "runs")):
                        began = time.monotonic()
                        r = await http.request(method, f"{paths[0]}/{tail}", json={
                            "message": f"m{n}", "agent_id": "gateway"} if method == "POST" else None)
                        calls.append((tail, r.status_code, time.monotonic() - began))
                    n += 1
                    await asyncio.sleep(0.5)

            caller = asyncio.create_task(other_caller())
            opening = []
            for i in range(VIEWERS):
                viewer = _Viewer()
                viewers.append(viewer)
                opening.append(asyncio.create_task(asyncio.wait_for(viewer.open(info, f"{paths[i % THREADS]}/events"), 5)))
                await asyncio.sleep(OPEN_S / VIEWERS)
            results = await asyncio.gather(*opening, return_exceptions=True)
            done.set()
            await caller

            hung = [r for r in results if isinstance(r, BaseException)]
            assert hung == [], f"{len(hung)} viewers got no answer within 5 s: {hung[:3]}"
            statuses = [v.status for v in viewers]
            assert set(statuses) <= {200, 503}, sorted(set(statuses))
            cap = await _metric(metrics, "threadline_gateway_max_streams")
            assert 1 <= cap < NOFILE / 2, cap  # the limit in force fits the descriptors
            streaming = [v for v in viewers if v.status == 200]
            refused = [v for v in viewers if v.status == 503]
            assert 0 < len(streaming) <= cap and len(streaming) + len(refused) == VIEWERS
            assert all(v.retry_after and v.retry_after.isdigit() and b"at_capacity" in v.code for v in refused)
            assert max(v.took for v in refused) < 2, max(v.took for v in refused)
            assert await _metric(metrics, "threadline_gateway_open_streams") == len(streaming)
            assert calls and all(200 <= status < 300 for _, status, _ in calls), calls
            assert max(took for _, _, took in calls) < 1, sorted(calls, key=lambda c: -c[2])[:3]

            # (c) 90 % of the viewers leave; 5 s later a new one is served
            for v in streaming[: len(streaming) * 9 // 10]:
                v.close()
            await asyncio.sleep(5)
            late = _Viewer()
            viewers.append(late)
            await asyncio.wait_for(late.open(info, f"{paths[0]}/events"), 5)
            assert late.status == 200
        assert proc.poll() is None, "the gateway exited"
        text = log_path.read_text()
        assert "Too many open files" not in text and "EMFILE" not in text
        assert "stream limit lowered to fit the descriptor limit" in text
    finally:
        for v in viewers:
            with contextlib.suppress(Exception):
                v.close()
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            await asyncio.to_thread(proc.wait, 20)
        if proc.poll() is None:
            proc.kill()
