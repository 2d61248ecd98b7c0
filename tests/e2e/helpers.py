"""Helpers for end-to-end tests: collect a run's chunks, read stored rows."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import orjson

from threadline.client import ThreadSubscription


async def collect_run(sub: ThreadSubscription, *, timeout_s: float = 30.0, runs: int = 1) -> list[dict[str, Any]]:
    """Chunks until ``runs`` finish chunks have been seen."""
    out: list[dict[str, Any]] = []

    async def pump() -> None:
        finished = 0
        async for chunk in sub.stream:
            out.append(chunk)
            if chunk["type"] == "finish":
                finished += 1
                if finished == runs:
                    return

    try:
        await asyncio.wait_for(pump(), timeout_s)
    except TimeoutError:
        raise AssertionError(f"run did not finish in {timeout_s}s; got {[c['type'] for c in out]}") from None
    return out


async def rows(dsn: str, query: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.set_type_codec("jsonb", encoder=lambda v: orjson.dumps(v).decode(), decoder=orjson.loads, schema="pg_catalog",
                                  format="text")
        return await conn.fetch(query, *args)
    finally:
        await conn.close()
