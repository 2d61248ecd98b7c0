"""Python's collector in a service process (decision 91): the young generation is collected every
10,000 allocations, and what the start-up made is frozen once the service has started."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
from collections.abc import Iterator

import pytest

from threadline import service
from threadline._internal import gc_tuning
from threadline.config import Settings


@pytest.fixture
def restore_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.set_threshold(*threshold)
    gc.unfreeze()


def test_a_services_young_generation_is_collected_every_10000_allocations(restore_gc: None) -> None:
    gc.set_threshold(700, 10, 10)
    gc_tuning.set_young_threshold(Settings().gc_young_threshold)
    assert gc.get_threshold() == (10_000, 10, 10)


def test_a_threshold_of_0_keeps_pythons_own(restore_gc: None) -> None:
    gc.set_threshold(700, 10, 10)
    gc_tuning.set_young_threshold(0)
    assert gc.get_threshold() == (700, 10, 10)


def test_the_process_entry_sets_the_threshold_before_serving(restore_gc: None,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int, int]] = []

    async def main(_service: object) -> None:
        seen.append(gc.get_threshold())

    gc.set_threshold(700, 10, 10)
    monkeypatch.setattr(service, "_main", main)
    monkeypatch.setattr(service, "configure", lambda **_: None)  # the test process keeps its logging
    monkeypatch.setenv("THREADLINE_GC_YOUNG_THRESHOLD", "5000")
    service.get_settings.cache_clear()
    try:
        service.run(_Started)  # type: ignore[arg-type]  # a stand-in: name, start, stop
    finally:
        service.get_settings.cache_clear()
    assert seen == [(5000, 10, 10)]


class _Started:
    name = "stand-in"

    def __init__(self, _settings: object = None) -> None:
        self.frozen_at_start: int | None = None

    async def start(self) -> None:
        self.frozen_at_start = gc.get_freeze_count()

    async def stop(self) -> None:
        pass


async def test_what_the_start_up_made_is_frozen_once_the_service_started(restore_gc: None) -> None:
    gc.unfreeze()
    started = _Started()
    loop = asyncio.get_running_loop()
    loop.call_later(0.2, os.kill, os.getpid(), signal.SIGTERM)  # ends serve through its handler
    try:
        await asyncio.wait_for(service.serve(started, watchdog=False), 10)  # type: ignore[arg-type]  # a stand-in
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    assert started.frozen_at_start == 0
    assert gc.get_freeze_count() > 10_000  # the test process's imports, at least
