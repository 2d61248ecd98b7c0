"""Running Threadline on a local cluster from a test session or a benchmark.

* :func:`ensure_native_cluster` — Kafka and PostgreSQL on their local ports, started with
  ``make infra-up`` when a port is closed (never stopped here: the cluster may be shared).
* :func:`create_database` / :func:`drop_database` — a private database per session, so several
  sessions share one cluster (with their own topic prefix).
* :class:`ModelServerProcess` — the fake model server (``threadline.testing.model_server``) in its
  own process, so that its work does not share the caller's event loop or GIL.
* :class:`ServiceSet` — the services as real processes (start, stop, ``kill -9``, freeze/thaw
  with SIGSTOP/SIGCONT, pid for CPU/RSS readings).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from threadline.services import NAMES as SERVICES
from threadline.store.dsn import PgAddress, multi_host, with_database
from threadline.testing import forkserver
from threadline.testing.forkserver import ProcessLike


def stop_process(proc: ProcessLike, sig: int = signal.SIGTERM, timeout_s: float = 10) -> None:
    """Send ``sig`` and wait up to ``timeout_s`` seconds; ``kill -9`` if it is still running then."""
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_file(path: Path, needle: str, timeout_s: float = 60, poll_s: float = 0.05) -> None:
    """Return once the file at ``path`` exists and contains ``needle`` (a log line, a pause point).

    Raises ``TimeoutError`` (with the needle and the file's name) after ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    while not (path.exists() and needle in path.read_text(errors="replace")):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{needle!r} did not appear in {path.name} within {timeout_s}s")
        time.sleep(poll_s)


def port_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    with socket.socket() as s:
        s.settimeout(timeout_s)
        return s.connect_ex((host, port)) == 0


@dataclass(frozen=True)
class NativeCluster:
    bootstrap: str
    admin_dsn: str
    """DSN of the cluster's main database (used to create and drop session databases)."""
    started_here: bool


def ensure_native_cluster(root: Path, *, kafka_port: int | None = None, pg_port: int | None = None,
                          timeout_s: float = 900) -> NativeCluster:
    """Return the local cluster's addresses; run ``make infra-up`` in ``root`` if a port is closed.

    Ports default to ``THREADLINE_KAFKA_PORT`` (19092) and ``THREADLINE_PG_PORT`` (15432); with
    ``THREADLINE_PG_STANDBY=1`` (``make infra-up PG_STANDBY=1``) the standby's port too
    (``THREADLINE_PG_STANDBY_PORT``, 15433), and ``admin_dsn`` names both servers with
    ``target_session_attrs=read-write``, so it reaches whichever is the primary. Safe to
    call from several processes at once (a file lock in ``root/.run`` lets one of them start it).
    Raises ``subprocess.CalledProcessError`` if ``make infra-up`` fails.
    """
    kport = kafka_port or int(os.environ.get("THREADLINE_KAFKA_PORT", "19092"))
    pport = pg_port or int(os.environ.get("THREADLINE_PG_PORT", "15432"))
    servers = [PgAddress("127.0.0.1", pport)]
    if os.environ.get("THREADLINE_PG_STANDBY") == "1":  # a primary and its standby, either may lead
        servers.append(PgAddress("127.0.0.1", int(os.environ.get("THREADLINE_PG_STANDBY_PORT") or pport + 1)))

    def up() -> bool:
        return port_open("127.0.0.1", kport) and any(port_open(a.host, a.port) for a in servers)

    started = False
    if not up():
        # several test processes (pytest-xdist) may find the cluster down at once: one starts it,
        # the others wait on the lock and then find it up
        lock_path = Path(os.environ.get("THREADLINE_RUN_DIR") or root / ".run") / "infra-up.lock"
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with lock_path.open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not up():
                subprocess.run(["make", "infra-up"], cwd=root, check=True, timeout=timeout_s)
                started = True
    admin_dsn = (multi_host(servers, user="threadline", password="threadline", database="threadline")
                 if len(servers) > 1 else f"postgresql://threadline:threadline@127.0.0.1:{pport}/threadline")
    return NativeCluster(bootstrap=f"127.0.0.1:{kport}", admin_dsn=admin_dsn, started_here=started)


async def create_database(admin_dsn: str, name: str) -> str:
    """Create database ``name`` next to ``admin_dsn``'s and return its DSN (not migrated)."""
    import asyncpg

    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return with_database(admin_dsn, name)


async def drop_database(admin_dsn: str, name: str, *, attempts: int = 20, pause_s: float = 0.25) -> bool:
    """Drop database ``name``, closing its connections; ``True`` once it is gone.

    ``DROP DATABASE … WITH (FORCE)`` ends every backend on the database, and PostgreSQL refuses
    it (``InsufficientPrivilegeError``) when one belongs to another role and the caller is no
    superuser: the role ``threadline`` that ``make infra-up`` creates only has ``CREATEDB``, and
    an autovacuum worker busy on the database at that moment counts as another role's. Then
    this ends the backends of its own role and drops without ``FORCE`` (which makes autovacuum
    workers exit and waits for them), ``attempts`` times ``pause_s`` seconds apart. A database
    it still cannot drop is left behind with a warning on stderr, never an error: a session's
    teardown must not fail a test that passed."""
    import asyncpg

    conn = await asyncpg.connect(admin_dsn)
    try:
        for _ in range(attempts):
            try:
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                return True
            except asyncpg.exceptions.InsufficientPrivilegeError:
                pass
            try:
                await conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                   "WHERE datname = $1 AND usename = current_user AND pid <> pg_backend_pid()", name)
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
                return True
            except asyncpg.exceptions.ObjectInUseError:
                await asyncio.sleep(pause_s)
    finally:
        await conn.close()
    print(f"drop_database: {name} is still in use after {attempts} attempts; left behind", file=sys.stderr)
    return False


class ModelServerProcess:
    """``python -m threadline.testing.model_server`` on a free port, in its own process."""

    def __init__(self, *, log_path: Path | None = None, host: str = "127.0.0.1") -> None:
        self.host = host
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    @property
    def api_base(self) -> str:
        return self.url + "/v1"

    def start(self, timeout_s: float = 30) -> None:
        """Start and wait until it listens. Raises ``RuntimeError`` if it does not."""
        ready = Path(tempfile.mkstemp(prefix="model-server-", suffix=".url")[1])
        ready.unlink()
        log = open(self.log_path or os.devnull, "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen([sys.executable, "-m", "threadline.testing.model_server", "--host", self.host,
                                      "--port", "0", "--ready-file", str(ready)], stdout=log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while not ready.exists() or not ready.read_text().strip():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the model server did not start")
            time.sleep(0.05)
        self.url = ready.read_text().strip()
        ready.unlink()

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_process(proc)


@dataclass
class ServiceSet:
    """Services as processes (``python -m threadline.services.<name>``), logs in ``log_dir/<instance>.log``.
    With ``fork`` (default: on unless ``THREADLINE_TEST_FORKSERVER=0``) each is forked from a warm
    fork server (:mod:`threadline.testing.forkserver`): the same module runs, without importing
    litellm again; the benchmark turns it off, so its processes are started as in production.

    ``env`` is the whole environment of every process (cluster addresses, topic prefix, agents
    module…); ``cwd`` is their working directory (the repository root, so that an agents module
    such as ``tests.e2e.agents`` imports).
    """

    env: dict[str, str]
    log_dir: Path
    cwd: Path
    procs: dict[str, ProcessLike] = field(default_factory=dict)
    fork: bool = field(default_factory=forkserver.enabled)
    started: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)
    """Each instance's service name and ``extra_env`` of its latest :meth:`start` (:meth:`start_again`)."""
    netns: dict[str, list[str]] = field(default_factory=dict)
    """Instance -> the command prefix that runs it in a network namespace
    (``threadline.testing.netns.Namespace.command([])``); such an instance is never forked."""

    def start(self, name: str, instance: str, timeout_s: float | None = None, **extra_env: str) -> None:
        """Start one instance and wait for its ``service started`` log line (``timeout_s``, default
        ``THREADLINE_TEST_START_TIMEOUT_S`` or 60 s: a shared, loaded machine imports slowly).

        Raises ``RuntimeError`` (with the log's tail) if it exits or does not start in time.
        """
        if timeout_s is None:
            timeout_s = float(os.environ.get("THREADLINE_TEST_START_TIMEOUT_S", "60"))
        env = {**self.env, "THREADLINE_INSTANCE_ID": instance, **extra_env}
        self.started[instance] = (name, dict(extra_env))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        path = self.log_dir / f"{instance}.log"
        if path.exists():  # each start gets a fresh log, so waits never match an earlier process
            n = len(list(self.log_dir.glob(f"{instance}.*.log"))) + 1
            path.rename(self.log_dir / f"{instance}.{n}.log")
        module = f"threadline.services.{name}"
        proc: ProcessLike
        prefix = self.netns.get(instance)
        if self.fork and prefix is None:
            proc = forkserver.spawn(module, env=env, cwd=self.cwd, log_path=path)
        else:
            with open(path, "ab") as log:  # the child keeps its own descriptor
                proc = subprocess.Popen([*(prefix or []), sys.executable, "-m", module], cwd=self.cwd, env=env,
                                        stdout=log, stderr=subprocess.STDOUT)
        self.procs[instance] = proc
        deadline = time.monotonic() + timeout_s
        while b"service started" not in path.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{instance} did not start:\n" + path.read_text()[-3000:])
            time.sleep(0.1)

    def start_again(self, instance: str, timeout_s: float | None = None) -> None:
        """Start a stopped or killed instance again with the ``extra_env`` of its latest start
        (a gateway keeps its port and keys). Raises as :meth:`start`."""
        name, extra_env = self.started[instance]
        self.start(name, instance, timeout_s, **extra_env)

    def log_path(self, instance: str) -> Path:
        """The log of the instance's latest start."""
        return self.log_dir / f"{instance}.log"

    def wait_log(self, instance: str, needle: str, timeout_s: float = 60) -> None:
        """Return once ``needle`` is in the instance's log. Raises ``TimeoutError`` after ``timeout_s``."""
        wait_file(self.log_path(instance), needle, timeout_s, poll_s=0.1)

    def start_all(self) -> None:
        """One instance of each service (``<name>-1``)."""
        for name in SERVICES:
            self.start(name, f"{name}-1")

    def pid(self, instance: str) -> int:
        return self.procs[instance].pid

    def kill(self, instance: str) -> None:
        """``kill -9``: no drain, no commit, no goodbye."""
        proc = self.procs.pop(instance)
        proc.kill()
        proc.wait()

    def freeze(self, instance: str) -> None:
        """``SIGSTOP``: the whole process stands still (no heartbeat, no I/O, sockets kept open),
        like a process descheduled for a long time; :meth:`thaw` resumes it."""
        self.procs[instance].send_signal(signal.SIGSTOP)

    def thaw(self, instance: str) -> None:
        """``SIGCONT``: resume an instance stopped by :meth:`freeze`."""
        self.procs[instance].send_signal(signal.SIGCONT)

    def stop(self, instance: str, sig: int = signal.SIGTERM, timeout_s: float = 20) -> None:
        """Ask one instance to stop (drain and close); ``kill -9`` after ``timeout_s``."""
        stop_process(self.procs.pop(instance), sig, timeout_s)

    def stop_all(self) -> None:
        for instance in list(self.procs):
            self.stop(instance)

    def alive(self) -> dict[str, bool]:
        return {k: p.poll() is None for k, p in self.procs.items()}
