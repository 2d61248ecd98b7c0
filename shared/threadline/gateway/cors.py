"""Cross-origin calls from browsers (CORS): pages from the configured origins
(``THREADLINE_GATEWAY_CORS_ORIGINS``) may call the gateway's ``/v1`` and ``/api`` with an
``Authorization`` or ``X-API-Key`` header; the preflight ``OPTIONS`` is answered before any
authentication (it carries no credentials). Other origins get no CORS headers, so their pages
cannot read the answers. Credentialed requests (``fetch`` with ``credentials: "include"``, as
Mastra Studio sends every call) are allowed: the gateway never reads a cookie, so a page still
needs the key or token in a header (decision 134).
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware

ALLOWED_HEADERS = ("authorization", "content-type", "x-api-key", "last-event-id", "x-mastra-client-type",
                   "x-mastra-dev-playground", "traceparent", "idempotency-key")
"""Request headers a page may send: the credentials, JSON, SSE resumption, Mastra's client headers,
a write's ``Idempotency-Key`` (decision 213)."""
EXPOSED_HEADERS = ("content-type", "idempotency-replayed", "retry-after")
"""Answer headers a page may read: a replayed write's mark, the wait of a 503 at capacity."""
MAX_AGE_S = 600
"""How long a browser may cache a preflight answer."""


def cors_middleware(origins: Sequence[str]) -> list[Middleware]:
    """The CORS middleware for ``origins`` (``*`` in it: any origin); none when empty."""
    if not origins:
        return []
    return [Middleware(CORSMiddleware, allow_origins=list(origins), allow_methods=["GET", "POST", "PUT", "PATCH",
                                                                                    "DELETE", "OPTIONS"],
                       allow_headers=list(ALLOWED_HEADERS), allow_credentials=True, max_age=MAX_AGE_S,
                       expose_headers=list(EXPOSED_HEADERS))]
