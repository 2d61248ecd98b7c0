"""Process readings from ``/proc`` (CPU seconds, RSS), an RSS sampler, and py-spy recordings
reduced to their top costs. Linux only (the benchmarks run on the native cluster)."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from threadline.testing.harness import stop_process

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat(pid: int | str, proc: Path) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name: ``[0]`` state, ``[1]`` ppid,
    ``[11]``/``[12]`` user/system ticks, ``[13]``/``[14]`` those of its ended, waited-for children."""
    return (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used by ``pid`` so far."""
    fields = _stat(pid, Path("/proc"))
    return (int(fields[11]) + int(fields[12])) / _TICK


def cpu_seconds_of(command: str, proc: Path = Path("/proc")) -> float:
    """User + system CPU seconds used so far by every process whose name (``/proc/<pid>/comm``)
    is ``command`` (e.g. ``postgres``: the server and all its backends), ended ones included:
    a process of ``command`` whose parent is not one (the server) also counts what its ended
    children used (``cutime`` + ``cstime``), so a backend that exits between two readings moves
    its CPU from one term to the other instead of out of the sum (the difference of two readings
    never goes negative). ``proc``: where ``/proc`` is (tests)."""
    stats: dict[str, list[str]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() == command:
                stats[entry.name] = _stat(entry.name, proc)
        except (OSError, ValueError, IndexError):  # ended meanwhile
            continue
    ticks = 0
    for fields in stats.values():
        ticks += int(fields[11]) + int(fields[12])
        if fields[1] not in stats:  # the server: its backends that ended, reaped by it
            ticks += int(fields[13]) + int(fields[14])
    return ticks / _TICK


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` now."""
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE


class RssPeak:
    """Samples the RSS of some pids every ``interval_s`` while running; ``peak[pid]`` is the max."""

    def __init__(self, pids: list[int], interval_s: float = 0.1) -> None:
        self.pids = pids
        self.interval_s = interval_s
        self.peak: dict[int, int] = {p: rss_bytes(p) for p in pids}
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> RssPeak:
        self._task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._sample()

    def _sample(self) -> None:
        for p in self.pids:
            with contextlib.suppress(OSError):
                self.peak[p] = max(self.peak[p], rss_bytes(p))

    async def _loop(self) -> None:
        while True:
            self._sample()
            await asyncio.sleep(self.interval_s)


class PySpy:
    """``py-spy record`` of one process in collapsed-stack form (``--format raw``), written to
    ``out`` + ``.gz`` when stopped. Unpacked, the file opens in speedscope
    (https://www.speedscope.app) as is.

    Only samples holding the GIL are kept (``--gil``), so the profile shows where CPU goes, not
    where the event loop waits."""

    def __init__(self, pid: int, out: Path, rate: int = 100) -> None:
        self.pid, self.out, self.rate = pid, out, rate
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> bool:
        exe = Path(sys.executable).with_name("py-spy")
        if not exe.exists():
            return False
        self.proc = subprocess.Popen([str(exe), "record", "--pid", str(self.pid), "--format", "raw",
                                      "--nolineno", "--gil", "--rate", str(self.rate), "--output", str(self.out)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return True

    def stop(self) -> Path | None:
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        stop_process(proc, signal.SIGINT, 30)
        if not self.out.exists():
            return None
        packed = self.out.with_name(self.out.name + ".gz")
        packed.write_bytes(gzip.compress(self.out.read_bytes()))
        self.out.unlink()
        return packed


def _frame_owner(frame: str) -> str:
    """``func (path)`` → what owns the frame: ``threadline.runtime``, ``litellm``, ``asyncio``…
    (py-spy shortens paths to the part below ``site-packages`` or the standard library)."""
    path = frame.rsplit("(", 1)[-1].rstrip(")")
    parts = path.split("/")
    if parts[0] == "threadline" and len(parts) > 2:
        return "threadline." + parts[1]
    if len(parts) > 1:
        return parts[0]
    return path.removesuffix(".py")


def top_costs(collapsed: Path, n: int = 8) -> dict[str, Any]:
    """From a collapsed-stack file: the ``n`` frames with most self time, the ``n`` owners
    (package or module) with most self time, and the ``n`` owners with most inclusive time
    (samples whose stack passes through them), each as (name, share of samples in %)."""
    self_frames: Counter[str] = Counter()
    owners: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    data = collapsed.read_bytes()
    text = (gzip.decompress(data) if collapsed.suffix == ".gz" else data).decode()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        c = int(count)
        frames = stack.split(";")
        leaf = frames[-1]
        self_frames[leaf.split(" (", 1)[0] + " (" + _frame_owner(leaf) + ")"] += c
        owners[_frame_owner(leaf)] += c
        for owner in {_frame_owner(f) for f in frames}:
            inclusive[owner] += c
        total += c
    if not total:
        return {"frames": [], "packages": [], "inclusive": [], "samples": 0}

    def pct(items: list[tuple[str, int]]) -> list[tuple[str, float]]:
        return [(k, round(100 * v / total, 1)) for k, v in items]

    skip = {"<frozen runpy>", "runpy", "asyncio", "services", "threading", "threadline.service"}
    return {"frames": pct(self_frames.most_common(n)), "packages": pct(owners.most_common(n)),
            "inclusive": pct([kv for kv in inclusive.most_common() if kv[0] not in skip][:n]), "samples": total}
