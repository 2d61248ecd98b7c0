"""Pause points held until a release file appears (``THREADLINE_PAUSE_RELEASE``), the harness's
way to let a held — possibly frozen, then resumed — process go on at a chosen moment."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from threadline._internal import faults


async def test_a_held_point_goes_on_once_the_release_file_exists(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    pause, release = tmp_path / "pause", tmp_path / "release"
    monkeypatch.setattr(faults, "_POINTS", frozenset({"ingress_route_before_commit"}))
    monkeypatch.setattr(faults, "_FILE", str(pause))
    monkeypatch.setattr(faults, "_RELEASE", str(release))
    held = asyncio.create_task(faults.pause_point("ingress_route_before_commit"))
    await asyncio.sleep(0.3)
    assert not held.done()  # holds while there is no release file
    assert pause.read_text() == "ingress_route_before_commit\n"
    release.touch()
    await asyncio.wait_for(held, 2)


async def test_an_unarmed_point_does_not_hold(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(faults, "_POINTS", frozenset({"scheduler_after_claim"}))
    monkeypatch.setattr(faults, "_RELEASE", str(tmp_path / "never"))
    await asyncio.wait_for(faults.pause_point("scheduler_after_route_before_mark"), 1)


async def test_a_point_holds_only_for_a_key_that_matches(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pause, release = tmp_path / "pause", tmp_path / "release"
    monkeypatch.setattr(faults, "_POINTS", frozenset({"after_step_result_stored"}))
    monkeypatch.setattr(faults, "_FILE", str(pause))
    monkeypatch.setattr(faults, "_RELEASE", str(release))
    monkeypatch.setattr(faults, "_MATCH", "th-mine")
    # another test's run goes through at once, and leaves no mark a test would wait for
    await asyncio.wait_for(faults.pause_point("after_step_result_stored", "th-left-behind"), 1)
    assert not pause.exists()
    held = asyncio.create_task(faults.pause_point("after_step_result_stored", "th-mine-1"))
    await asyncio.sleep(0.3)
    assert not held.done()
    assert pause.read_text() == "after_step_result_stored\n"
    release.touch()
    await asyncio.wait_for(held, 2)
