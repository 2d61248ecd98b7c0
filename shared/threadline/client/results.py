"""What the clients' requests answer, shared by the client over Kafka
(:class:`~threadline.client.ThreadlineClient`) and the one over HTTP
(:class:`~threadline.client.HttpThreadlineClient`): :class:`SendResult`, and the errors
:class:`RequestFailed` (an error reply) and :class:`BrokerUnavailableError`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from threadline.client.run_output import CreatedSignal
from threadline.errors import ThreadlineError
from threadline.events import Accepted, ErrorReply, Persisted

__all__ = ["BrokerUnavailableError", "RequestFailed", "SendResult"]


class BrokerUnavailableError(ThreadlineError):
    """The Kafka broker could not be reached in time: the client could not start, or a request
    was not acknowledged within ``reply_timeout_s`` (it may still arrive later; ingress then
    handles it once, by its event id)."""


class RequestFailed(ThreadlineError):  # noqa: N818 - a public name, kept for compatibility
    """Ingress answered a request with an error reply (``code``, ``message``)."""

    def __init__(self, reply: ErrorReply) -> None:
        super().__init__(f"{reply.code}: {reply.message}")
        self.code = reply.code
        self.reply = reply


@dataclass
class SendResult:
    """Return of ``send_message`` / ``queue_message`` (Mastra's ``{accepted, signal, persisted?}``).

    ``accepted`` resolves to the :class:`Accepted` reply (raises :class:`RequestFailed` on an
    error reply); on ``wake`` its ``output`` is a :class:`RunOutput` on the woken run's stream.
    ``signal`` is the :class:`CreatedSignal` (``id`` known at once; updated with the stored
    signal when ``accepted`` resolves). ``persisted`` resolves when a ``persist`` message is durable.
    """

    request_id: str
    accepted: asyncio.Future[Accepted]
    persisted: asyncio.Future[Persisted] | None = None
    signal: CreatedSignal | None = None
    sent_at_ms: int = 0
    """When the request was published (ms since the epoch, the client's clock)."""
    skipped: bool = False
    """``send_state_signal`` only: True when the lane already holds this cache key and mode, so
    nothing was sent (Mastra's ``{skipped: true, reason: "unchanged"}``, known when the call
    returns; ``signal`` is then ``None`` and ``accepted`` resolves to the ``Skipped`` reply)."""
    reason: str | None = None
    """Why it was skipped (``"unchanged"``); ``None`` otherwise."""
