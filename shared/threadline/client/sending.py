"""What the client does around a request, whatever the transport: the signal it creates, the
replies it waits for, and how a reply becomes a result or an error."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeAlias, TypeVar, overload

from threadline.client.results import RequestFailed
from threadline.client.run_output import CreatedSignal
from threadline.events import ErrorReply, QueueMessage, SendMessage, SendSignal, SendStateSignal, Stream
from threadline.events.base import Event
from threadline.events.messages import now_iso
from threadline.ids import new_id

SignalRequest: TypeAlias = SendMessage | QueueMessage | SendSignal | SendStateSignal | Stream
"""A request that creates a signal (``Stream`` covers ``Generate``)."""

_R = TypeVar("_R")
_S = TypeVar("_S")
_E = TypeVar("_E", bound=Event)

_REQUEST_ID: ContextVar[str | None] = ContextVar("threadline_request_id", default=None)


@contextmanager
def request_id(value: str) -> Iterator[None]:
    """Within it, the requests this task sends carry ``value`` as their ``event_id`` (and
    ``sig_<value>`` as the ``signal_id`` of a request that creates a signal): a request sent again
    under the same id is one request to ingress, answered as the first (decision 213; the gateway
    sends an ``Idempotency-Key``'s request so)."""
    token = _REQUEST_ID.set(value)
    try:
        yield
    finally:
        _REQUEST_ID.reset(token)


def identified(request: _E) -> _E:
    """``request`` with the id :func:`request_id` set, if one is set (else unchanged)."""
    value = _REQUEST_ID.get()
    if value is None:
        return request
    update: dict[str, object] = {"event_id": value}
    if "signal_id" in type(request).model_fields and getattr(request, "signal_id", None) is None:
        update["signal_id"] = f"sig_{value}"
    return request.model_copy(update=update)


def given(**kw: object) -> dict[str, Any]:
    """The keyword arguments that are not ``None``."""
    return {k: v for k, v in kw.items() if v is not None}


def slots(request: object, accepted: tuple[str, ...] = ("accepted",)) -> dict[str, tuple[str, ...]]:
    """The replies a send waits for: ``accepted`` (of the reply types ``accepted``), and
    ``persisted`` when the request asks to persist (``if_idle`` / ``if_active`` ``persist``)."""
    out = {"accepted": accepted}
    if getattr(getattr(request, "if_idle", None), "behavior", None) == "persist" \
            or getattr(getattr(request, "if_active", None), "behavior", None) == "persist":
        out["persisted"] = ("persisted",)
    return out


def checked(fut: asyncio.Future[_R], timeout_s: float, then: Callable[[_R], _S]) -> asyncio.Future[_S]:
    """A future of ``fut``'s reply within ``timeout_s`` (``TimeoutError`` else), passed through
    ``then``; an ``ErrorReply`` raises :class:`RequestFailed`. A reply already there is taken
    now (``then`` runs before this returns)."""
    if fut.done() and not fut.cancelled() and fut.exception() is None:
        out: asyncio.Future[_S] = asyncio.get_running_loop().create_future()
        try:
            out.set_result(answer(fut.result(), then))
        except RequestFailed as exc:
            out.set_exception(exc)
        return out

    async def wait() -> _S:
        return answer(await asyncio.wait_for(fut, timeout_s), then)

    return asyncio.ensure_future(wait())


def as_is(reply: _R) -> _R:
    """The reply unchanged (:func:`checked` / :func:`answer` with nothing to do)."""
    return reply


@overload
def answer(reply: _R) -> _R: ...
@overload
def answer(reply: _R, then: Callable[[_R], _S]) -> _S: ...
def answer(reply: object, then: Callable[..., object] = as_is) -> object:
    """``then(reply)`` (or the reply). Raises :class:`RequestFailed` for an ``ErrorReply``."""
    if isinstance(reply, ErrorReply):
        raise RequestFailed(reply)
    return then(reply)


def with_signal(request: SignalRequest) -> tuple[SignalRequest, CreatedSignal]:
    """``request`` with a new ``signal_id`` (unless it names one) and the :class:`CreatedSignal` it
    will create, as far as the client knows it before ingress answers."""
    request = identified(request)
    signal_id = request.signal_id
    if signal_id is None:
        signal_id = new_id("sig")
        request = request.model_copy(update={"signal_id": signal_id})
    if isinstance(request, SendSignal):
        sig = request.signal
        body: dict[str, Any] = {"contents": sig.contents, "attributes": sig.attributes, "metadata": sig.metadata,
                                "provider_options": sig.provider_options}
        kind, tag = sig.type, sig.tag_name
    elif isinstance(request, SendStateSignal):
        st = request.state
        body = {"contents": st.contents, "attributes": dict(st.attributes), "metadata": st.metadata}
        kind, tag = "state", st.tag_name
    else:
        msg = request.message
        body = {"contents": msg} if isinstance(msg, str | list) else msg.model_dump()
        kind, tag = "user", None
    signal = CreatedSignal(id=signal_id, type=kind, contents=body["contents"],
                           attributes=dict(body.get("attributes") or {}), metadata=dict(body.get("metadata") or {}),
                           created_at=now_iso(), tag_name=tag, provider_options=body.get("provider_options"))
    return request, signal
