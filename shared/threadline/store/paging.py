"""Pages of a thread's reads (decision 221): how big a page is, and the cursor that continues one.

Every list read of a thread (its messages, runs and inbox records) answers one page: at most
``limit`` rows (:data:`DEFAULT_LIMIT` when unset, never more than :data:`MAX_LIMIT`) and at most
about :data:`PAGE_BYTES` of the rows' big text (a message's content, a run's answer), and the
cursor of the next page when there may be more. The order of every read is a total order —
a key no two rows share (a message's ``position``; ``(created_at, id)`` for runs and records) —
and the cursor is that key of the page's last row, so a walk never repeats or skips a row that
existed when it began, whatever rows share a ``created_at``, and rows appended during the walk
appear once or not at all.

A cursor is opaque text (URL-safe base64 of a small JSON array) naming the read it belongs to.
Pure functions here, and :func:`every_row`, the walk over a page read it is given.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Literal, TypeVar

import orjson

DEFAULT_LIMIT = 100
"""Rows per page when the caller names no ``limit``."""
MAX_LIMIT = 1000
"""The largest ``limit`` served; a larger one is served as this."""
PAGE_BYTES = 4 * 1024 * 1024
"""A page ends early once its rows' big text (UTF-8 bytes) reaches this (4 MiB); it always holds
at least one row, so one bigger row comes alone."""

Row = TypeVar("Row")
Read = Literal["messages", "runs", "inbox"]
"""The read a cursor continues."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class CursorError(ValueError):
    """A cursor that is not one this module made for the read it is given to."""


def page_limit(raw: str | None) -> int:
    """The page size asked for by a ``limit`` query parameter: :data:`DEFAULT_LIMIT` when
    ``None``, capped at :data:`MAX_LIMIT`.

    Raises:
        ValueError: not a whole number, or below 1.
    """
    if raw is None:
        return DEFAULT_LIMIT
    value = int(raw)
    if value < 1:
        raise ValueError(f"limit must be at least 1, not {value}")
    return min(value, MAX_LIMIT)


def _micros(at: datetime) -> int:
    delta = at - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _time(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def _encode(key: list[object]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(key)).decode().rstrip("=")


def _decode(read: Read, cursor: str) -> list[object]:
    try:
        key = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError):
        raise CursorError("not a cursor of this read: start again without one") from None
    if not isinstance(key, list) or not key or key[0] != read:
        raise CursorError(f"not a cursor of the {read} read: start again without one")
    return key[1:]


def position_cursor(position: int) -> str:
    """The cursor after the message at ``position``."""
    return _encode(["messages", position])


def after_position(cursor: str | None) -> int:
    """The ``position`` a messages page starts after (``0``: the first page).

    Raises:
        CursorError: ``cursor`` is not a messages cursor.
    """
    if cursor is None:
        return 0
    key = _decode("messages", cursor)
    if len(key) != 1 or not isinstance(key[0], int):
        raise CursorError("not a cursor of the messages read: start again without one")
    return key[0]


def time_cursor(read: Literal["runs", "inbox"], created_at: datetime, row_id: str) -> str:
    """The cursor after the row ``(created_at, row_id)`` of ``read`` (times kept to the microsecond)."""
    return _encode([read, _micros(created_at), row_id])


def after_time(read: Literal["runs", "inbox"], cursor: str | None) -> tuple[datetime, str] | None:
    """The ``(created_at, id)`` a page of ``read`` starts after; ``None``: the first page.

    Raises:
        CursorError: ``cursor`` is not a cursor of ``read``.
    """
    if cursor is None:
        return None
    key = _decode(read, cursor)
    if len(key) != 2 or not isinstance(key[0], int) or not isinstance(key[1], str):
        raise CursorError(f"not a cursor of the {read} read: start again without one")
    return _time(key[0]), key[1]


def kept(flags: list[bool]) -> tuple[int, bool]:
    """How many leading rows a page keeps, and whether more may follow, from each fetched row's
    "within the page" flag (the query fetches ``limit + 1`` rows and flags those within
    ``limit`` and :data:`PAGE_BYTES`; the flags never turn back to true)."""
    count = next((i for i, flag in enumerate(flags) if not flag), len(flags))
    return count, count < len(flags)


async def every_row(read_page: Callable[[str | None], Awaitable[tuple[list[Row], str | None]]]) -> list[Row]:
    """Every row of a paged read: ``read_page(cursor)`` called from ``None`` on, each next page by
    the cursor the last one gave, until one gives none. Each statement stays bounded; the list is
    the whole read, for callers that asked for all of it."""
    out: list[Row] = []
    cursor: str | None = None
    while True:
        page, cursor = await read_page(cursor)
        out += page
        if cursor is None:
            return out
