"""``Idempotency-Key`` on the gateway's writes (docs/gateway.md, "Retries and Idempotency-Key";
decision 213).

A write that carries the header is claimed in PostgreSQL under ``(resource, key)``
(:mod:`threadline.store.idempotency`) with a fingerprint of its method, path and JSON body and
one ingress request id. The first request is sent under that id; a retry with the same key and
the same request is answered with the first answer (kept once given), or, while the first is
still under way or its answer was lost with its gateway, sent again under the same id, which
ingress answers as the first (a known event id is never routed twice). Either way the answer
carries ``Idempotency-Replayed: true``. The same key with another request is refused (409
``idempotency_key_reused``), before anything is sent. Keys are the resource's: another resource's
same key is another key.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable
from typing import Literal

import asyncpg
import orjson
from starlette.requests import Request
from starlette.responses import Response

from threadline.client.sending import request_id
from threadline.ids import new_id
from threadline.logging import get_logger
from threadline.store import idempotency as rows
from threadline.store.db import Database

log = get_logger(__name__)

HEADER = "Idempotency-Key"
REPLAYED = "Idempotency-Replayed"
MAX_KEY_CHARS = 255
"""The longest key taken (visible ASCII only)."""
PRUNE_EVERY_S = 600.0
"""How often (s) at most one gateway process deletes keys older than their 24 hours."""

Decision = Literal["send", "resend", "replay", "conflict"]
_pruned_at = 0.0


class KeyRefused(ValueError):  # noqa: N818 - what it is: the key cannot be used (an HTTP answer)
    """The key is not usable: ``status`` 409 (another request used it) or 422 (malformed)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def check_key(value: str) -> str:
    """The key, stripped. Raises :class:`KeyRefused` (422 ``invalid_idempotency_key``) for an
    empty key, one over :data:`MAX_KEY_CHARS` or one with other than visible ASCII."""
    key = value.strip()
    if not key or len(key) > MAX_KEY_CHARS or not all(33 <= ord(c) < 127 for c in key):
        raise KeyRefused(422, "invalid_idempotency_key",
                         f"Idempotency-Key must be 1 to {MAX_KEY_CHARS} visible ASCII characters")
    return key


def fingerprint(method: str, path: str, body: bytes) -> str:
    """SHA-256 (hex) of the method, the path and the body (JSON with sorted keys, so key order and
    spacing do not count; bytes as they are when not JSON)."""
    try:
        canonical = orjson.dumps(orjson.loads(body or b"{}"), option=orjson.OPT_SORT_KEYS)
    except orjson.JSONDecodeError:
        canonical = body
    return hashlib.sha256(f"{method} {path}\n".encode() + canonical).hexdigest()


def decide(row: rows.KeyRow, presented: str) -> Decision:
    """What to do with a request whose key holds ``row``: ``conflict`` (another request used the
    key), ``replay`` (its answer is kept), ``send`` (this request claimed the key) or ``resend``
    (the first is under way, or its answer was lost: send again under the first's id)."""
    if row.fingerprint != presented:
        return "conflict"
    if row.status is not None:
        return "replay"
    return "send" if row.claimed else "resend"


def keeps(status: int) -> bool:
    """True for an answer kept for retries: a success. An error answer is not kept: a retry
    sends again under the same id, and ingress answers it as it answered the first."""
    return 200 <= status < 300


async def served(db: Database, scope: str, key: str, request: Request,
                 handler: Callable[[Request], Awaitable[Response]]) -> Response:
    """The answer to ``request`` under ``key`` of resource ``scope``, by :func:`decide`.

    Raises:
        KeyRefused: 409 ``idempotency_key_reused`` (the key named another request).
    """
    presented = fingerprint(request.method, request.url.path, await request.body())
    async with db.connection() as conn:
        row = await rows.claim(conn, scope=scope, key=key, fingerprint=presented, request_id=new_id())
    decision = decide(row, presented)
    log.info("idempotent write", decision=decision, path=request.url.path)
    if decision == "conflict":
        raise KeyRefused(409, "idempotency_key_reused",
                         "this Idempotency-Key was used for another request (method, path or body differ)")
    if decision == "replay":
        return Response(orjson.dumps(row.answer), status_code=row.status or 200, media_type="application/json",
                        headers={REPLAYED: "true"})
    with request_id(row.request_id):
        response = await handler(request)
    if keeps(response.status_code) and isinstance(getattr(response, "body", None), bytes):  # JSON, not a stream
        async with db.connection() as conn:
            await rows.record(conn, scope=scope, key=key, request_id=row.request_id, status=response.status_code,
                              answer=orjson.loads(bytes(response.body)))
            await _prune(conn)
    if decision == "resend":
        response.headers[REPLAYED] = "true"
    return response


def honouring(handler: Callable[[Request], Awaitable[Response]],
              scope_of: Callable[[Request], Awaitable[tuple[Database, str]]]) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` answering by :func:`served` when the request carries :data:`HEADER`;
    ``scope_of`` gives the database and the resource the caller acts for (raising to refuse it)."""

    async def wrapped(request: Request) -> Response:
        value = request.headers.get(HEADER)
        if value is None:
            return await handler(request)
        db, scope = await scope_of(request)
        return await served(db, scope, check_key(value), request, handler)

    wrapped.__name__ = handler.__name__
    return wrapped


async def _prune(conn: asyncpg.Connection) -> None:
    global _pruned_at
    if time.monotonic() - _pruned_at >= PRUNE_EVERY_S:
        _pruned_at = time.monotonic()
        await rows.forget_expired(conn)
