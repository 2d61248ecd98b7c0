"""Calling user code (tools, tool hooks, processors, dynamic instructions, delivery policies)
without letting it block the event loop.

A worker runs many steps on one event loop: a tool written as a plain ``def`` that sleeps or does
blocking I/O would freeze every run of the worker — no chunks, no heartbeats, no aborts. Plain
callables therefore run in a thread of a pool of their own (context variables copied; not the
loop's default executor, which blocking user code would otherwise starve of threads for the
runtime's own uses); coroutine functions are awaited on the loop as they are.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

_T = TypeVar("_T")

USER_THREADS = int(os.environ.get("THREADLINE_USER_THREADS", "64"))
"""Threads plain user callables run in (per process); more calls at once wait for a free one."""
_pool: ThreadPoolExecutor | None = None
_busy = 0
_busy_lock = threading.Lock()


def busy() -> int:
    """How many plain user callables are running in their threads now (a stopping service
    exits without waiting for them: a thread cannot be interrupted)."""
    return _busy


def _counted(call: Callable[[], _T]) -> _T:
    global _busy
    with _busy_lock:
        _busy += 1
    try:
        return call()
    finally:
        with _busy_lock:
            _busy -= 1


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=USER_THREADS, thread_name_prefix="threadline-user")
    return _pool


def is_async(fn: Callable[..., object]) -> bool:
    """True when calling ``fn`` returns a coroutine by construction (an ``async def``, a partial
    of one, or an object whose ``__call__`` is one)."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = type(fn).__dict__.get("__call__")  # a callable object's own method
    return call is not None and inspect.iscoroutinefunction(call)


async def call_user(fn: Callable[..., Any], *args: object, **kwargs: object) -> Any:
    """``fn(*args, **kwargs)``: awaited on the loop when ``fn`` is async; otherwise run in a
    thread of the user-code pool (an awaitable it returns is then awaited on the loop).

    Cancelling the caller (an aborted run) returns at once; a plain function already running in
    its thread finishes there and its result is dropped (a thread cannot be interrupted).

    Raises:
        Exception: whatever ``fn`` raises.
    """
    if is_async(fn):
        return await fn(*args, **kwargs)
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    out = await asyncio.get_running_loop().run_in_executor(_executor(), _counted, call)
    return await out if inspect.isawaitable(out) else out
