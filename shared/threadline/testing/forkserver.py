"""Service processes forked from a warm fork server, for test suites that start many of them.

A fresh ``python -m threadline.services.processor_worker`` spends most of its start importing
litellm (seconds of CPU on a small machine); the e2e suite starts workers well over a hundred
times. :func:`spawn` instead forks the service from a :mod:`multiprocessing` fork server that
imported the heavy third-party libraries once (:data:`PRELOAD`), then runs the very module
``python -m`` would run (``runpy``), with the instance's environment, working directory and log.
Nothing of Threadline is imported before the fork, so settings and agents are read from the
child's own environment, as in a fresh process.

The child is a real process with its own pid: ``kill -9``, ``SIGSTOP``/``SIGCONT`` and
``SIGTERM`` behave as for a process started with :class:`subprocess.Popen`, and
:class:`ForkedProcess` answers the part of ``Popen``'s interface the harness uses.
``THREADLINE_TEST_FORKSERVER=0`` turns it off (every start is then ``python -m``).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Protocol

PRELOAD = ["litellm", "openai", "aiokafka", "asyncpg", "httpx", "pydantic", "pydantic_settings", "structlog",
           "orjson", "faststream"]
"""Imported once by the fork server (third-party only: none reads Threadline's settings)."""

_context: multiprocessing.context.ForkServerContext | None = None


class ProcessLike(Protocol):
    """What the harness needs of a started service: :class:`subprocess.Popen` or :class:`ForkedProcess`."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...


def enabled() -> bool:
    """Whether :func:`spawn` is used (``THREADLINE_TEST_FORKSERVER``, default on where fork exists)."""
    return os.environ.get("THREADLINE_TEST_FORKSERVER", "1") != "0" and hasattr(os, "fork")


def _fork_server() -> multiprocessing.context.ForkServerContext:
    global _context
    if _context is None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # the preload must not fetch the cost map
        context = multiprocessing.get_context("forkserver")
        assert isinstance(context, multiprocessing.context.ForkServerContext)  # narrowing for mypy
        context.set_forkserver_preload(PRELOAD)
        _context = context
    return _context


def _serve(module: str, env: dict[str, str], cwd: str, log_path: str) -> None:
    """In the forked child: become ``python -m module`` with ``env`` in ``cwd``, output to ``log_path``."""
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115 - the process's own stdout
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115 - the process's own stderr
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    # as ``python -m`` would set it: the working directory first, then PYTHONPATH
    extra = [cwd, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    sys.path[:0] = [p for p in extra if p not in sys.path]
    sys.argv = [module]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


class ForkedProcess:
    """A service forked by the fork server, with :class:`subprocess.Popen`'s ``pid``, ``poll``,
    ``wait`` (raises :class:`subprocess.TimeoutExpired`), ``send_signal``, ``terminate`` and
    ``kill``. ``returncode`` is negative for a signal, as with ``Popen``."""

    def __init__(self, process: multiprocessing.process.BaseProcess) -> None:
        self._process = process

    @property
    def pid(self) -> int:
        pid = self._process.pid
        assert pid is not None  # started in spawn()
        return pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(str(self._process.name), timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self._process.terminate()

    def kill(self) -> None:
        self._process.kill()


def spawn(module: str, *, env: dict[str, str], cwd: Path, log_path: Path) -> ForkedProcess:
    """Start ``python -m module`` as a fork of the warm fork server (started on first use).

    ``env`` is the child's whole environment, ``cwd`` its working directory (first on its
    ``sys.path``, as with ``-m``), and its stdout and stderr are appended to ``log_path``.
    """
    log_path.touch()  # exists on return, as with Popen's open log
    process = _fork_server().Process(target=_serve, args=(module, env, str(cwd), str(log_path)),
                                     name=f"{module}@{log_path.stem}", daemon=True)
    process.start()
    return ForkedProcess(process)
