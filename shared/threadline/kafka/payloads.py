"""Big payloads by reference, as Kafka records carry them.

A record body over ``Settings.max_record_bytes`` is stored elsewhere (a :class:`PayloadRefs`:
Threadline's is :class:`threadline.store.payloads.PayloadStore`, a PostgreSQL table) and the record
carries a reference. On the wire a spilled record keeps its key and headers (``tl-type``,
``tl-event-id``… so routing and dedupe work unchanged), gains the header ``tl-payload-ref: <id>``,
and its value is ``{"payload_ref": "<id>", "bytes": <size of the original body>}``.
:func:`resolve` puts the original body back; every consumer of the project resolves before
decoding (the services in ``kafka.handling.guarded``, the client's subscriptions and reply
listener), so handlers and subscribers never see the reference.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Protocol, TypeVar

import orjson

from threadline.errors import InvalidEventError
from threadline.events.codec import Headers, header

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_R = TypeVar("_R", bound="DataclassInstance")

REF_HEADER = "tl-payload-ref"
"""The header naming a spilled record's payload id."""


class PayloadRefs(Protocol):
    """Where spilled record bodies are kept."""

    async def put(self, body: bytes, *, topic: str | None = None) -> str:
        """Store ``body`` (of a record for ``topic``); return its payload id."""
        ...

    async def get(self, pid: str) -> bytes | None:
        """The body stored as ``pid``; ``None`` when there is none."""
        ...


def reference(pid: str, size: int) -> bytes:
    """The value of a record whose body (``size`` bytes) was stored as ``pid``."""
    return orjson.dumps({"payload_ref": pid, "bytes": size})


def with_ref_header(headers: Headers | None, pid: str) -> Headers:
    """``headers`` plus the payload-reference header naming ``pid``."""
    return [*(headers or []), (REF_HEADER, pid.encode())]


async def resolve(record: _R, store: PayloadRefs | None) -> _R:
    """``record`` (a :class:`~threadline.kafka.consumer.Record` or any dataclass with ``headers``
    and ``value``) with its stored body back in ``value``; the record itself when it carries no
    reference.

    Raises:
        InvalidEventError: ``payload_missing`` when the referenced body is not in the store (or
            there is no store to ask).
    """
    pid = header(getattr(record, "headers", None), REF_HEADER)
    if pid is None:
        return record
    body = await store.get(pid) if store is not None else None
    if body is None:
        raise InvalidEventError(f"payload {pid!r} referenced by the record is not stored", code="payload_missing")
    return dataclasses.replace(record, value=body)
