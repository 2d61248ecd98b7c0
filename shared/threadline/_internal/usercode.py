"""Calling user code (tools, tool hooks) without letting it block the event loop.

A worker runs many steps on one event loop: a tool written as a plain ``def`` that sleeps or does
blocking I/O would freeze every run of the worker — no chunks, no heartbeats, no aborts. Plain
callables therefore run in a worker thread (``asyncio.to_thread``: the default executor, context
variables copied); coroutine functions are awaited on the loop as they are.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any


def is_async(fn: Callable[..., Any]) -> bool:
    """True when calling ``fn`` returns a coroutine by construction (an ``async def``, a partial
    of one, or an object whose ``__call__`` is one)."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = type(fn).__dict__.get("__call__")  # a callable object's own method
    return call is not None and inspect.iscoroutinefunction(call)


async def call_user(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``: awaited on the loop when ``fn`` is async; otherwise run in a worker thread
    (an awaitable it returns is then awaited on the loop).

    Cancelling the caller (an aborted run) returns at once; a plain function already running in
    its thread finishes there and its result is dropped (a thread cannot be interrupted).

    Raises:
        Exception: whatever ``fn`` raises.
    """
    if is_async(fn):
        return await fn(*args)
    out = await asyncio.to_thread(fn, *args)
    return await out if inspect.isawaitable(out) else out
