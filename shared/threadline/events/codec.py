"""Kafka record ⇄ event. Routing fields go in headers so consumers can route and dedupe
without decoding the body (``tl-type``, ``tl-version``, ``tl-event-id``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

import orjson
from pydantic import TypeAdapter, ValidationError

from threadline.errors import InvalidEventError, UnknownEventError
from threadline.events.base import SCHEMA_VERSION, Event
from threadline.ops import tracing

_T = TypeVar("_T")

Headers = list[tuple[str, bytes]]


def encode(event: Event) -> tuple[bytes, Headers]:
    """Return ``(value, headers)`` for ``event``."""
    body = event.dump()
    headers = [
        ("tl-type", str(body.get("type", "")).encode()),
        ("tl-version", str(event.schema_version).encode()),
        ("tl-event-id", event.event_id.encode()),
    ]
    if tracing.enabled():  # the event carries the trace it was made in (envelope and headers)
        if not body.get("trace"):
            body["trace"] = tracing.inject({})
        headers += tracing.headers_of(body["trace"])
    return orjson.dumps(body), headers


def encode_dict(body: Mapping[str, object]) -> bytes:
    """Encode a ready JSON dict (hot path: chunks)."""
    return orjson.dumps(body)


def header(headers: Iterable[tuple[str, bytes | str]] | None, name: str) -> str | None:
    """Value of header ``name`` as text, or ``None``."""
    for key, value in headers or ():
        if key == name:
            return value.decode(errors="replace") if isinstance(value, bytes | bytearray) else str(value)
    return None


def decode(value: bytes | None, adapter: TypeAdapter[_T]) -> _T:
    """Parse and validate ``value`` with ``adapter``.

    Raises:
        InvalidEventError: not JSON, not an object, or fails validation (``code`` says which).
        UnknownEventError: unknown ``type`` or a ``schema_version`` newer than ours.
    """
    if value is None:
        raise InvalidEventError("empty record value", code="empty")
    try:
        body = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise InvalidEventError(f"not valid JSON: {exc}", code="invalid_json") from exc
    return validate(body, adapter)


def validate(body: object, adapter: TypeAdapter[_T]) -> _T:
    """Validate an already parsed record body with ``adapter`` (the second half of :func:`decode`).

    Raises:
        InvalidEventError / UnknownEventError: as :func:`decode`.
    """
    if not isinstance(body, dict):
        raise InvalidEventError("event must be a JSON object", code="invalid_event")
    version = body.get("schema_version", SCHEMA_VERSION)
    if not isinstance(version, int) or version > SCHEMA_VERSION or version < 1:
        raise UnknownEventError(f"unsupported schema_version {version!r} (this service speaks "
                                f"1..{SCHEMA_VERSION})", code="unsupported_version")
    try:
        return adapter.validate_python(body)
    except ValidationError as exc:
        kinds = {err["type"] for err in exc.errors()}
        if "union_tag_invalid" in kinds or "union_tag_not_found" in kinds:
            raise UnknownEventError(f"unknown or missing event type {body.get('type')!r}",
                                    code="unknown_type") from exc
        raise InvalidEventError(_summarise(exc), code="validation_failed") from exc


def _summarise(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"])
        parts.append(f"{loc}: {err['msg']}")
    more = f" (+{exc.error_count() - 5} more)" if exc.error_count() > 5 else ""
    return "; ".join(parts) + more
