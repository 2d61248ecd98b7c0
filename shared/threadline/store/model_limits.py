"""Cluster-wide provider limits: per-model requests-per-minute and tokens-per-minute token
buckets in PostgreSQL (table ``model_rate_buckets``), shared by every processor-worker
(docs/models.md, "Cluster-wide limits").

One statement per take: the bucket is refilled for the time since it was last touched (up to
its capacity), the cost is taken — the level may go below zero, which reserves the caller's
place — and the caller waits ``-level / rate`` seconds, outside any connection, before it calls
the provider. Callers are served in the order they took, at the configured rate. A caller whose
wait ends without a call (its step cancelled: an abort, a hand-back, a failed take) gives its
place back, so later callers do not wait for requests that never happen (decision 197).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from threadline.logging import get_logger
from threadline.store.db import Database

log = get_logger(__name__)

_TAKE = """
INSERT INTO model_rate_buckets AS b (key, level, at) VALUES ($1::text, $2::float8 - $4::float8, clock_timestamp())
ON CONFLICT (key) DO UPDATE SET
    level = least($2::float8, b.level + extract(epoch FROM clock_timestamp() - b.at)::float8 * $3::float8)
            - $4::float8,
    at = clock_timestamp()
RETURNING level
"""

_GIVE_BACK = """
UPDATE model_rate_buckets AS b SET
    level = least($2::float8, b.level + extract(epoch FROM clock_timestamp() - b.at)::float8 * $3::float8 + $4::float8),
    at = clock_timestamp()
WHERE key = $1::text
"""


@dataclass(frozen=True, slots=True)
class ModelLimit:
    """The limits of one model (``None``: unlimited)."""

    rpm: float | None = None
    """Requests per minute, over all workers."""
    tpm: float | None = None
    """Tokens per minute (prompt estimate before the call, output tokens after it)."""


def parse_limits(raw: Mapping[str, object] | None) -> dict[str, ModelLimit]:
    """``{"openai/gpt-5": {"rpm": 500, "tpm": 200000}}`` → :class:`ModelLimit` per model.

    Raises:
        ValueError: a limit that is not a positive number, or an unknown key.
    """
    out = {}
    for model, spec in (raw or {}).items():
        if not isinstance(spec, Mapping) or set(spec) - {"rpm", "tpm"}:
            raise ValueError(f"model limit of {model}: only rpm and tpm, got {spec!r}")
        values = {}
        for key in ("rpm", "tpm"):
            value = spec.get(key)
            if value is not None and (not isinstance(value, int | float) or isinstance(value, bool) or value <= 0):
                raise ValueError(f"model limit {key} of {model} must be a positive number, got {value!r}")
            values[key] = None if value is None else float(value)
        out[model] = ModelLimit(**values)
    return out


class PgModelLimiter:
    """Waits until a model call fits its model's limits (see the module docstring).

    Args:
        db: the database (one short statement per take; no connection held while waiting).
        limits: per model string (as the agent names it).
        burst_s: a bucket holds this many seconds of its rate (at least one request / the
            request's tokens); 0 spaces calls evenly.
        sleep: how to wait.
    """

    def __init__(self, db: Database, limits: Mapping[str, ModelLimit], *, burst_s: float = 1.0,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._db = db
        self._limits = dict(limits)
        self._burst_s = burst_s
        self._sleep = sleep

    def limited(self, model: str) -> bool:
        """``model`` has a limit."""
        return model in self._limits

    def _capacity(self, rate: float, cost: float) -> float:
        return max(cost, 1.0, rate * self._burst_s)

    async def _take(self, key: str, per_minute: float, cost: float) -> float:
        rate = per_minute / 60.0
        async with self._db.connection() as conn:
            level = await conn.fetchval(_TAKE, key, self._capacity(rate, cost), rate, cost)
        return max(0.0, -float(level) / rate)

    async def _give_back(self, taken: list[tuple[str, float, float]]) -> None:
        """Return places taken by a call that will not happen: ``(key, per_minute, cost)`` each."""
        async with self._db.connection() as conn:
            for key, per_minute, cost in taken:
                rate = per_minute / 60.0
                await conn.execute(_GIVE_BACK, key, self._capacity(rate, cost), rate, cost)

    async def acquire(self, model: str, tokens: int) -> float:
        """Take one request and ``tokens`` (the prompt's estimate) of ``model``'s buckets and wait
        until they are due; returns the seconds waited (0 for a model without limits).

        Raises:
            asyncio.CancelledError: the caller was cancelled while it waited; its places are
                given back first (so is any error of a take, after the places already taken).
        """
        limit = self._limits.get(model)
        if limit is None:
            return 0.0
        wait = 0.0
        taken: list[tuple[str, float, float]] = []
        try:
            if limit.rpm:
                wait = await self._take(f"{model}|rpm", limit.rpm, 1.0)
                taken.append((f"{model}|rpm", limit.rpm, 1.0))
            if limit.tpm and tokens > 0:
                wait = max(wait, await self._take(f"{model}|tpm", limit.tpm, float(tokens)))
                taken.append((f"{model}|tpm", limit.tpm, float(tokens)))
            if wait > 0:
                log.info("model rate limit: waiting", model=model, wait_s=round(wait, 3))
                await self._sleep(wait)
        except BaseException:
            if taken:
                try:  # shielded: a second cancellation does not keep the places
                    await asyncio.shield(self._give_back(taken))
                    log.info("model rate limit: places given back", model=model, places=len(taken))
                except Exception as exc:  # noqa: BLE001 - the places stay taken; the caller's own end is what it raises
                    log.warning("model rate limit: places not given back", model=model, error=str(exc))
            raise
        return wait

    async def settle(self, model: str, output_tokens: int | None) -> None:
        """Charge the tokens a finished call produced to ``model``'s tokens-per-minute bucket."""
        limit = self._limits.get(model)
        if limit is None or not limit.tpm or not output_tokens:
            return
        await self._take(f"{model}|tpm", limit.tpm, float(output_tokens))
