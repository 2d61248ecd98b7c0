"""The transport over the HTTP gateway (docs/gateway.md): a URL and an API key (or a JWT) only —
no Kafka bootstrap, no PostgreSQL DSN, no settings read.

Every request is one HTTP call to the gateway (:mod:`threadline.gateway.app`), which publishes it
to ingress and answers with the reply, so the replies this transport returns are already done;
a thread's chunks come as Server-Sent Events (:class:`HttpThreadSubscription`); reads are the
gateway's ``GET`` endpoints (:class:`~threadline.client.gateway_http.GatewayReader`). Errors as
:mod:`threadline.client.gateway_http` lists them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from threadline.client.gateway_http import GatewayHttp, GatewayReader, thread_path
from threadline.client.http_subscription import HttpThreadSubscription, resolved
from threadline.client.transport import Follow, ReadName, Sent
from threadline.events import RunResult
from threadline.events.base import Event
from threadline.events.replies import REPLY_ADAPTER, Aborted, ToolCallResolved

ROUTES: dict[str, tuple[str, tuple[str, ...]]] = {
    "send_message": ("messages", ("message", "agent_id", "run_id", "if_active", "if_idle")),
    "queue_message": ("queue", ("message", "agent_id", "if_idle")),
    "send_signal": ("signals", ("signal", "agent_id", "run_id", "if_active", "if_idle")),
    "send_state_signal": ("state", ("state", "agent_id", "if_active", "if_idle")),
    "send_notification_signal": ("notifications", ("notifications", "agent_id", "if_idle")),
    "stream": ("stream", ("message", "agent_id", "options", "thread")),
    "generate": ("generate", ("message", "agent_id", "options", "thread")),
    "abort": ("abort", ("run_id", "agent_id")),
    "tool_approval": ("{verb}-tool-call", ("run_id", "tool_call_id", "agent_id", "reason")),
}
"""Request type → the thread's endpoint (``POST …/threads/{thread_id}/<path>``) and the body's fields."""


def body_of(request: Event) -> tuple[str, dict[str, Any]]:
    """The gateway path and JSON body of an ingress request: the fields the caller gave (the
    gateway fills the defaults, the request id and the signal id).

    Raises:
        ValueError: a request the gateway has no endpoint for.
    """
    kind = str(getattr(request, "type", ""))
    if kind not in ROUTES:
        raise ValueError(f"the gateway has no endpoint for {kind!r} requests")
    path, fields = ROUTES[kind]
    given = request.model_dump(mode="json", exclude_unset=True, exclude_none=True)
    body = {k: given[k] for k in fields if k in given}
    if body.get("agent_id") == "-":  # an abort (or an approval) that names no agent
        del body["agent_id"]
    if kind == "tool_approval":
        path = path.format(verb="approve" if given.get("approved") else "decline")
    return f"{thread_path(given['resource_id'], given['thread_id'])}/{path}", body


class HttpTransport:
    """The gateway at ``base_url`` as a transport.

    Args:
        base_url: the gateway, e.g. ``http://127.0.0.1:18000``.
        api_key: an API key or a JWT (``None``: a gateway open for local development).
        timeout_s: each HTTP call's timeout (``generate`` waits ``timeout_s`` more than its own).
        transport: an ``httpx`` transport (tests: ``httpx.MockTransport``).
    """

    agents_module: str | None = None  # the gateway encodes call-level objects

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout_s: float = 60.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.http = GatewayHttp(base_url, api_key=api_key, timeout_s=timeout_s, transport=transport)
        self.reader = GatewayReader(self.http)
        self.reply_timeout_s = timeout_s

    @property
    def base_url(self) -> str:
        return self.http.base_url

    def __repr__(self) -> str:  # never the key
        return f"HttpTransport({self.base_url!r})"

    async def start(self) -> None:
        """Check that the gateway answers (``/healthz``).

        Raises:
            BrokerUnavailableError: it cannot be reached.
        """
        await self.http.healthz()

    async def stop(self) -> None:
        """Close the HTTP connections (open subscriptions end with them)."""
        await self.http.close()

    async def request(self, request: Event, expect: Mapping[str, tuple[str, ...]], *,
                      wait_s: float | None = None) -> Sent:
        """``POST`` the request under its ``event_id`` as ``Idempotency-Key`` (retried after a lost
        connection, a 502 or a 503: one logical call, one request, decision 213); the answer fills
        ``accepted`` (and ``persisted`` when the gateway waited for it), ``notified``, ``aborted``,
        ``resolved`` or ``result``.

        Raises:
            RequestFailed, BrokerUnavailableError, TimeoutError, GatewayError: as
                :meth:`GatewayHttp.call <threadline.client.gateway_http.GatewayHttp.call>`.
        """
        path, body = body_of(request)
        kind = getattr(request, "type", "")
        if kind == "generate":
            wait = 300.0 if wait_s is None else wait_s
            answer = await self.http.call("POST", path, {**body, "timeout_s": wait}, timeout_s=wait + self.http.timeout_s,
                                          idempotency_key=request.event_id)
            return Sent(request.event_id, {"result": resolved(RunResult.model_validate(answer))})
        if kind == "abort":
            answer = await self.http.call("POST", path, body, missing_ok=True)
            reply = Aborted(request_id=request.event_id, aborted=bool(answer and answer.get("aborted")),
                            run_id=(answer or {}).get("run_id"))
            return Sent(request.event_id, {"aborted": resolved(reply)})
        if kind == "tool_approval":  # approving twice runs the tool once (decision 227)
            answer = await self.http.call("POST", path, body, idempotency_key=request.event_id)
            return Sent(request.event_id, {"resolved": resolved(ToolCallResolved(request_id=request.event_id, **answer))})
        answer = await self.http.call("POST", path, body, idempotency_key=request.event_id)
        persisted = answer.pop("persisted", None)
        accepted = REPLY_ADAPTER.validate_python(answer)
        replies = {next(iter(expect)) if expect else "accepted": resolved(accepted)}
        if persisted is not None:
            replies["persisted"] = resolved(REPLY_ADAPTER.validate_python(persisted))
        return Sent(accepted.request_id, replies)

    async def subscribe(self, resource_id: str, thread_id: str, follow: Follow) -> HttpThreadSubscription:
        """Follow the thread over SSE (``GET …/events``); a thread that does not exist yet is
        waited for and then read from its first chunk."""
        sub = HttpThreadSubscription(
            self.http.http, f"{thread_path(resource_id, thread_id)}/events", from_beginning=follow.from_beginning,
            from_offset=follow.from_offset, from_time_ms=follow.from_time_ms,
            after=dict(follow.after) if follow.after is not None else None, hide_signals=follow.hide_signals,
            on_abort=follow.on_abort, on_active=follow.on_active)
        await sub.start()
        return sub

    async def read(self, name: ReadName, /, **params: object) -> Any:
        """The gateway's answer (:data:`~threadline.client.transport.ReadName`)."""
        return await self.reader.read(name, **params)
