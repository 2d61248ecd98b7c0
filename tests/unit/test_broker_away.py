"""B15 without a broker: the client and the CLI fail fast and clearly, a service start waits for
the broker, and a shutdown step that cannot finish is left behind at its deadline."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest
from typer.testing import CliRunner

from threadline import service
from threadline.cli import app
from threadline.client import ThreadlineClient
from threadline.client.client import BrokerUnavailableError
from threadline.config import Settings, get_settings

NOWHERE = "127.0.0.1:9"  # the discard port: nothing listens there


async def test_the_client_raises_a_clear_error_when_the_broker_is_away() -> None:
    t0 = time.monotonic()
    with pytest.raises(BrokerUnavailableError, match="cannot reach the Kafka broker"):
        async with ThreadlineClient(Settings(kafka_bootstrap=NOWHERE, reply_timeout_s=5)):
            pass
    assert time.monotonic() - t0 <= 5 + 3


def test_the_cli_prints_an_error_line_and_exits_2_when_the_broker_is_away(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THREADLINE_KAFKA_BOOTSTRAP", NOWHERE)
    monkeypatch.setenv("THREADLINE_REPLY_TIMEOUT_S", "5")
    get_settings.cache_clear()  # the CLI reads the environment set above
    try:
        result = CliRunner().invoke(app, ["send-message", "-r", "res", "-t", "th", "-a", "echo-agent", "hi"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 2, result.output
    line = orjson.loads(result.stdout.strip().splitlines()[-1])
    assert line["type"] == "error" and line["code"] == "broker_unavailable"


async def test_a_start_waits_for_the_broker_instead_of_failing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asyncio, "sleep", _no_sleep)
    calls = []

    async def connect() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionRefusedError("broker away")

    await service._until_connected("producer", connect)
    assert len(calls) == 3

    async def broken() -> None:
        raise ValueError("not a connection problem")

    with pytest.raises(ValueError):
        await service._until_connected("producer", broken)


_real_sleep = asyncio.sleep


async def _no_sleep(_s: float) -> None:
    await _real_sleep(0)


async def test_a_shutdown_step_that_hangs_is_left_behind_at_its_deadline() -> None:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await service._bounded("producer", asyncio.Event().wait(), t0 + 0.3)  # a flush that never ends
    assert loop.time() - t0 < 1.0


class _Blocked:
    """A service whose start waits for a broker that never comes."""

    name = "blocked"

    def __init__(self) -> None:
        self.stopped = False
        self.start_cancelled = False

    async def start(self) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.start_cancelled = True
            raise

    async def stop(self) -> None:
        self.stopped = True


async def test_sigterm_while_waiting_for_the_broker_cancels_the_start_and_stops() -> None:
    import os
    import signal

    blocked = _Blocked()
    loop = asyncio.get_running_loop()
    loop.call_later(0.2, os.kill, os.getpid(), signal.SIGTERM)  # handled by serve's handler
    try:
        await asyncio.wait_for(service.serve(blocked, watchdog=False), 10)  # type: ignore[arg-type]  # a stand-in: name, start, stop
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    assert blocked.start_cancelled and blocked.stopped
