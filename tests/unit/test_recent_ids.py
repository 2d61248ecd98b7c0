"""RecentIds: the worker's memory of aborted runs stays bounded (it heard every run's abort)."""

from __future__ import annotations

from threadline._internal.recent import RecentIds


def test_ids_are_forgotten_after_the_window() -> None:
    now = [0.0]
    ids = RecentIds(10.0, clock=lambda: now[0])
    for i in range(1000):
        now[0] = i * 0.1  # 1,000 aborts over 100 s
        ids.add(f"run-{i}")
    assert len(ids) == 100  # only the last 10 s
    assert "run-999" in ids and "run-900" in ids and "run-899" not in ids


def test_adding_again_restarts_the_window_and_discard_forgets() -> None:
    now = [0.0]
    ids = RecentIds(10.0, clock=lambda: now[0])
    ids.add("a")
    now[0] = 8.0
    ids.add("a")
    ids.add("b")
    now[0] = 15.0
    ids.add("c")
    assert "a" in ids and "b" in ids
    ids.discard("a")
    ids.discard("never-added")
    assert "a" not in ids and len(ids) == 2
