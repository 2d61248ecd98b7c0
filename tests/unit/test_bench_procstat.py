"""``bench.procstat.cpu_seconds_of``: a server's ended backends stay in the sum (the 1c row's
PostgreSQL CPU went negative when backends exited during the figure)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.procstat import cpu_seconds_of

TICK = os.sysconf("SC_CLK_TCK")


def _proc(root: Path, pid: int, comm: str, ppid: int, utime: int, stime: int, cutime: int = 0,
          cstime: int = 0) -> None:
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "comm").write_text(comm + "\n")
    rest = ["S", str(ppid)] + ["0"] * 9 + [str(utime), str(stime), str(cutime), str(cstime)] + ["0"] * 30
    (d / "stat").write_text(f"{pid} ({comm}) " + " ".join(rest) + "\n")


def test_an_ended_backend_moves_to_the_servers_children_time(tmp_path: Path) -> None:
    _proc(tmp_path, 100, "postgres", 1, utime=50, stime=10)
    _proc(tmp_path, 101, "postgres", 100, utime=30, stime=5)
    _proc(tmp_path, 102, "postgres", 100, utime=20, stime=5)
    _proc(tmp_path, 200, "python", 1, utime=999, stime=999, cutime=999)
    (tmp_path / "self").mkdir()
    before = cpu_seconds_of("postgres", tmp_path)
    assert before == pytest.approx((50 + 10 + 30 + 5 + 20 + 5) / TICK)

    # backend 102 used 10 more ticks, then ended: the server reaped it
    for f in (tmp_path / "102").iterdir():
        f.unlink()
    (tmp_path / "102").rmdir()
    _proc(tmp_path, 100, "postgres", 1, utime=50, stime=10, cutime=28, cstime=7)
    after = cpu_seconds_of("postgres", tmp_path)
    assert after - before == pytest.approx(10 / TICK)


def test_children_time_counted_once_for_the_root_only(tmp_path: Path) -> None:
    _proc(tmp_path, 100, "postgres", 1, utime=1, stime=1, cutime=5, cstime=5)
    _proc(tmp_path, 101, "postgres", 100, utime=1, stime=1, cutime=7, cstime=7)  # a backend's own children
    assert cpu_seconds_of("postgres", tmp_path) == pytest.approx((1 + 1 + 5 + 5 + 1 + 1) / TICK)


def test_the_running_machine_reads_without_error() -> None:
    assert cpu_seconds_of("no-such-command-here") == 0.0
    assert cpu_seconds_of(Path("/proc/self/comm").read_text().strip()) > 0
