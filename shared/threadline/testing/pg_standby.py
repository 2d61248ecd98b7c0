"""A PostgreSQL primary with a synchronous standby of its own, for a test that fails it over.

:class:`StandbyPair` runs ``deploy/native/postgres.sh`` with ``THREADLINE_PG_STANDBY=1`` in a run
directory and on two ports of its own (never the shared cluster's 15432), so a test may stop and
promote its servers beside other test processes. Its :attr:`StandbyPair.dsn` names both servers
with ``target_session_attrs=read-write``, as the services are configured with a standby
(docs/operations.md, "A PostgreSQL standby").
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from threadline.store.dsn import PgAddress, multi_host
from threadline.testing.harness import port_open

_PROMOTED = re.compile(r"promoted \S+ on \S+ in ([0-9.]+) s")


def free_port_pair(low: int = 20000, high: int = 30000, tries: int = 200) -> int:
    """A port ``p`` such that ``p`` and ``p + 1`` both accept no connection on 127.0.0.1 now.

    Raises ``RuntimeError`` when ``tries`` random picks in ``[low, high)`` found none."""
    pick = random.SystemRandom()
    for _ in range(tries):
        port = pick.randrange(low, high - 1)
        if not port_open("127.0.0.1", port) and not port_open("127.0.0.1", port + 1):
            return port
    raise RuntimeError(f"no two free ports in a row in [{low}, {high})")


@dataclass
class StandbyPair:
    """``pg`` on ``port`` and ``pg2`` on ``port + 1``: a primary and its synchronous standby.

    Args:
        root: the repository (its ``deploy/native/postgres.sh`` runs).
        run_dir: the pair's run directory (``THREADLINE_RUN_DIR``: its pid files and logs; the
            data lives in ``/var/tmp/threadline-<hash of run_dir>``).
        port: the first server's port; the second listens on ``port + 1``.
    """

    root: Path
    run_dir: Path
    port: int

    @property
    def ports(self) -> tuple[int, int]:
        return self.port, self.port + 1

    def dsn(self, database: str = "threadline") -> str:
        """Both servers, ``target_session_attrs=read-write``, as role ``threadline``."""
        return multi_host([PgAddress("127.0.0.1", p) for p in self.ports], user="threadline",
                          password="threadline", database=database)

    def server_dsn(self, port: int, database: str = "threadline") -> str:
        """One server only, whatever its role (to look at a standby)."""
        return f"postgresql://threadline:threadline@127.0.0.1:{port}/{database}"

    def superuser(self, port: int) -> dict[str, object]:
        """``asyncpg.connect`` keywords for role ``postgres`` over the server's unix socket (trusted
        locally): what role ``threadline`` may not see, such as ``pg_stat_replication.sync_state``."""
        digest = hashlib.sha1(str(self.run_dir).encode()).hexdigest()[:8]
        return {"host": f"/var/tmp/threadline-{digest}", "port": port, "user": "postgres", "database": "postgres"}

    def _run(self, command: str, timeout_s: float = 180, script: str = "postgres.sh") -> str:
        env = {**os.environ, "THREADLINE_RUN_DIR": str(self.run_dir), "THREADLINE_PG_PORT": str(self.port),
               "THREADLINE_PG_STANDBY": "1", "THREADLINE_PG_STANDBY_PORT": str(self.port + 1)}
        env.pop("THREADLINE_PGBOUNCER_PORT", None)
        done = subprocess.run(["bash", str(self.root / "deploy" / "native" / script), command], cwd=self.root,
                              env=env, capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0 and command != "status":
            raise RuntimeError(f"{script} {command} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
        return done.stdout + done.stderr

    def pgbouncer(self, command: str) -> int:
        """Run ``deploy/native/pgbouncer.sh command`` (``install``, ``start``, ``stop``) for this
        pair; return its port (``port + 1000``). It forwards to the primary, and ``promote``
        restarts it onto the new one. Raises ``RuntimeError`` when the script fails."""
        self._run(command, timeout_s=600, script="pgbouncer.sh")
        return self.port + 1000

    def unavailable(self) -> str | None:
        """Why no pair can run here (PostgreSQL's server binaries missing and not installable:
        ``postgres.sh install`` needs root and apt-get), or ``None`` when one can."""
        try:
            self._run("install", timeout_s=600)
        except RuntimeError as exc:
            return str(exc).splitlines()[-1]
        return None

    def start(self) -> None:
        """Make (first time) and start both servers; return once the standby streams synchronously.
        Raises ``RuntimeError`` with the script's output when it fails."""
        self._run("start")

    def promote(self) -> float:
        """The failover: stop the primary, promote the standby. Returns the seconds the script
        measured from the stop to the promoted server's first answer."""
        started = time.monotonic()
        out = self._run("promote")
        found = _PROMOTED.search(out)
        return float(found.group(1)) if found else time.monotonic() - started

    def rejoin(self) -> None:
        """Make the stopped former primary the synchronous standby of the new one."""
        self._run("rejoin")

    def roles(self) -> dict[int, str]:
        """``{port: "primary" | "standby" | "stopped"}`` from the script's ``status``."""
        out = self._run("status")
        roles = dict.fromkeys(self.ports, "stopped")
        for line in out.splitlines():
            found = re.search(r"alive\s+127\.0\.0\.1:(\d+) (primary|standby)", line)
            if found:
                roles[int(found.group(1))] = found.group(2)
        return roles

    def primary_port(self) -> int:
        """The port of the server that is the primary now. Raises ``RuntimeError`` if none runs."""
        for port, role in self.roles().items():
            if role == "primary":
                return port
        raise RuntimeError("no primary runs")

    def destroy(self) -> None:
        """Stop both servers and delete their data."""
        self._run("destroy")
