"""Smoke tests of the fault harness added for the B-series cases: freezing one service process
(SIGSTOP / SIGCONT) and a broker outage of a chosen length (``stop_broker`` / ``start_broker``).
The named pause points are exercised by the B13 and B17 cases."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.e2e.faults import restart_unavailable, start_broker, stop_broker
from threadline.testing.harness import port_open

pytestmark = pytest.mark.serial  # stops the shared broker: runs alone (make test)


def _state(pid: int) -> str:
    """The process's state letter from /proc (``T``: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_freeze_stops_the_whole_process_and_thaw_resumes_it(services) -> None:
    services.start("ingress", "ingress-frz")
    try:
        pid = services.pid("ingress-frz")
        services.freeze("ingress-frz")
        time.sleep(0.3)
        assert _state(pid) == "T"
        services.thaw("ingress-frz")
        time.sleep(0.3)
        assert _state(pid) in ("S", "R")
        assert services.alive()["ingress-frz"]
    finally:
        services.stop("ingress-frz")


def test_the_broker_stays_away_until_started_again() -> None:
    why = restart_unavailable()
    if why:
        pytest.skip(f"the broker cannot be stopped and started from this checkout: {why}")
    port = int(os.environ.get("THREADLINE_KAFKA_PORT", "19092"))
    stop_broker()
    try:
        time.sleep(2)
        assert not port_open("127.0.0.1", port)
    finally:
        start_broker()
    assert port_open("127.0.0.1", port)
