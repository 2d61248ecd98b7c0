"""Record handling shared by every service: decode, dedupe, retry transient faults, dead-letter.

Invariant 8: bad input is answered, never dropped, never fatal. A record that cannot be decoded
gets a dead-letter record with the reason (and an error reply when it names a reply target); a
record whose handling keeps failing after retries is dead-lettered the same way.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable
from typing import Any

from tenacity import RetryCallState

from threadline.errors import InvalidEventError
from threadline.events.codec import header
from threadline.events.dead_letters import DeadLetter
from threadline.kafka.consumer import Handler, Record
from threadline.kafka.payloads import PayloadRefs, resolve
from threadline.kafka.producer import Producer
from threadline.logging import get_logger
from threadline.ops import tracing
from threadline.ops.metrics import DEAD_LETTERS, RETRIES
from threadline.transient import (
    DEAD_LETTER_BACKOFF,
    DEAD_LETTER_RETRY_S,
    RECORD_BACKOFF,
    TRANSIENT,
    Backoff,
    is_transient,
    retrying,
)

__all__ = ["TRANSIENT", "DeadLetters", "guarded", "is_transient"]

log = get_logger(__name__)


class DeadLetters:
    """Writes dead-letter records for one service."""

    def __init__(self, producer: Producer, topic: str, service: str) -> None:
        self._producer = producer
        self._topic = topic
        self._service = service

    async def write(self, record: Record, *, code: str, reason: str,
                    request_id: str | None = None) -> None:
        """Publish a dead letter holding ``record`` whole, and wait for the acknowledgement;
        a transient failure (a slow or restarting broker) is retried with backoff for up to two
        minutes, since the record's offset is committed once this returns."""
        async for attempt in retrying(DEAD_LETTER_BACKOFF, for_s=DEAD_LETTER_RETRY_S):
            with attempt:
                await self._write(record, code=code, reason=reason, request_id=request_id)

    async def _write(self, record: Record, *, code: str, reason: str, request_id: str | None) -> None:
        value: bytes = record.value or b""
        try:
            raw, encoding = value.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            raw, encoding = base64.b64encode(value).decode(), "base64"
        key = record.key.decode(errors="replace") if record.key else None
        letter = DeadLetter(service=self._service, source_topic=record.topic,
                            partition=record.partition, offset=record.offset, key=key, code=code,
                            reason=reason[:2000], raw=raw, raw_encoding=encoding,
                            request_id=request_id)
        await self._producer.publish(self._topic, letter, key=key)
        DEAD_LETTERS.labels(code).inc()
        log.warning("dead-lettered", code=code, reason=reason[:300], topic=record.topic,
                    partition=record.partition, offset=record.offset)


def guarded(handler: Callable[[Record], Awaitable[None]], dead_letters: DeadLetters, *,
            on_invalid: Callable[[Record, InvalidEventError], Awaitable[None]] | None = None,
            payloads: PayloadRefs | None = None, attempts: int = 6, max_wait_s: float = RECORD_BACKOFF.max_s,
            retry_for_s: float | None = None) -> Handler:
    """Wrap ``handler`` so the consumer always goes on.

    0. a record carrying a payload reference gets its stored body back first (``payloads``);
    1. ``InvalidEventError`` → ``on_invalid`` (e.g. an error reply) and a dead letter;
    2. transient faults → retried with exponential backoff (at most ``max_wait_s`` apart),
       ``attempts`` times in all, or for ``retry_for_s`` seconds when given (services: long
       enough to outlast a broker or Postgres restart; the record stays unfinished meanwhile,
       so its offset is not committed, and a shutdown hands it back uncommitted);
    3. anything else, or retries spent → dead letter with the reason.
    """
    backoff = Backoff(first_s=RECORD_BACKOFF.first_s, max_s=max_wait_s)

    async def run(record: Record) -> None:
        resolved = record  # the dead letter keeps the record as it came (a reference stays one)
        try:
            async for attempt in retrying(backoff, attempts=attempts if retry_for_s is None else None,
                                          for_s=retry_for_s, before_sleep=_count_retry):
                with attempt, tracing.consuming(record.topic, record.headers, **{
                        "messaging.kafka.message.key": record.key.decode(errors="replace") if record.key else None,
                        "messaging.kafka.offset": record.offset, "messaging.kafka.partition": record.partition}):
                    resolved = await resolve(record, payloads)
                    await handler(resolved)
        except InvalidEventError as exc:
            if on_invalid is not None:
                try:
                    await on_invalid(resolved, exc)
                except Exception:
                    log.exception("error reply failed")
            await dead_letters.write(record, code=exc.code, reason=str(exc),
                                     request_id=_request_id(record))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("handling failed; dead-lettering")
            await dead_letters.write(record, code="handler_failed", reason=f"{type(exc).__name__}: {exc}",
                                     request_id=_request_id(record))

    return run


def _count_retry(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome is not None else None
    RETRIES.labels(type(exc).__name__ if exc is not None else "unknown").inc()


def _request_id(record: Record) -> str | None:
    return header(record.headers, "tl-event-id")


def raw_field(record: Record, name: str) -> Any:
    """Best-effort read of a top-level JSON field of an undecodable record (for error replies).

    orjson refuses JSON that is well-formed but not valid UTF-8 text — a lone surrogate escape
    (``"\\ud800"``), bytes that are not UTF-8 — so such a record would get a dead letter and no
    reply; the standard library's parser, on the body decoded with replacement characters, still
    finds the ids to answer with. JSON that is cut short or broken is searched for a plain string
    field ``"name": "…"`` (no escapes). ``None`` when nothing is found."""
    import json
    import re

    import orjson

    try:
        body = orjson.loads(record.value)
    except Exception:  # noqa: BLE001 - best effort on a record that may not be JSON
        text = (record.value or b"").decode("utf-8", errors="replace")
        try:
            body = json.loads(text)
        except ValueError:
            found = re.search(r'"' + re.escape(name) + r'"\s*:\s*"([^"\\\x00-\x1f]{1,256})"', text)
            return found.group(1) if found else None
    value = body.get(name) if isinstance(body, dict) else None
    if isinstance(value, str):  # what we echo back must itself be encodable
        value = value.encode("utf-8", errors="replace").decode("utf-8")
    return value
