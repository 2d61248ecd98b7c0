"""``/readyz`` answers 503 naming the failing check (one that raises or hangs counts as failed);
``/healthz`` answers while the process lives; ``/metrics`` is Prometheus text."""

from __future__ import annotations

import asyncio

from starlette.testclient import TestClient

from threadline.ops.metrics import DEAD_LETTERS
from threadline.ops.server import make_app


async def _yes() -> bool:
    return True


async def _no() -> bool:
    return False


async def _raises() -> bool:
    raise ConnectionRefusedError("postgres away")


async def _hangs() -> bool:
    await asyncio.sleep(60)
    return True


def test_ready_only_when_every_check_passes() -> None:
    ok = TestClient(make_app({"kafka": _yes, "postgres": _yes}))
    assert ok.get("/readyz").status_code == 200
    bad = TestClient(make_app({"kafka": _no, "postgres": _raises, "migrations": _hangs}))
    response = bad.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {"ready": False, "checks": {"kafka": False, "postgres": False, "migrations": False}}
    assert bad.get("/healthz").status_code == 200


def test_metrics_are_prometheus_text() -> None:
    DEAD_LETTERS.labels("invalid_event").inc()
    body = TestClient(make_app({})).get("/metrics")
    assert body.status_code == 200 and body.headers["content-type"].startswith("text/plain")
    assert 'threadline_dead_letters_total{code="invalid_event"}' in body.text
