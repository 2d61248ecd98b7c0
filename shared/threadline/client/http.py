"""The Python client over the HTTP gateway: the public API of :class:`ThreadlineClient` with a
URL and an API key (or a JWT) only — no Kafka bootstrap, no PostgreSQL DSN (docs/gateway.md,
"The Python client over HTTP")::

    async with ThreadlineClient.connect_http("https://threadline.example", api_key=KEY) as tl:
        sub = await tl.subscribe_to_thread("user-1", "thread-1")
        sent = await tl.send_message("hi", agent_id="support-agent", resource_id="user-1", thread_id="thread-1")
        accepted = await sent.accepted               # answered by the gateway's POST
        async for chunk in sub.stream: ...           # Server-Sent Events (httpx-sse)

Every request is one HTTP call to the gateway (:mod:`threadline.gateway.app`), which publishes
to ingress and awaits the reply; big payloads are stored and resolved by the gateway. Errors:
an ingress error reply is :class:`RequestFailed` as over Kafka; 503 is
:class:`BrokerUnavailableError`; 504 is ``TimeoutError``; 401 / 403 / other refusals are
:class:`GatewayError`. A thread that does not exist and a thread of another resource look the
same (404): reads answer ``None`` / ``[]`` for both.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx

from threadline.client.http_subscription import HttpThreadSubscription, resolved
from threadline.client.inbox_marks import InboxMarks
from threadline.client.results import BrokerUnavailableError, RequestFailed, SendResult
from threadline.client.run_output import CreatedSignal, RunOutput
from threadline.errors import ThreadlineError
from threadline.events import RunResult
from threadline.events.messages import now_iso
from threadline.events.replies import REPLY_ADAPTER, Accepted, ErrorReply

if TYPE_CHECKING:
    from threadline.client.agent_handle import AgentHandle


class GatewayError(ThreadlineError):
    """The gateway refused a request: ``status`` (401, 403, 404, 422…), ``code`` and ``message``
    of its ``{"error": {code, message}}`` body."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code


def _seg(value: str) -> str:
    return quote(value, safe="")


class HttpThreadlineClient(InboxMarks):
    """:class:`~threadline.client.ThreadlineClient`'s public API over the gateway's HTTP API.

    Args:
        base_url: the gateway, e.g. ``http://127.0.0.1:18000``.
        api_key: an API key or a JWT, sent as ``Authorization: Bearer …`` (``None``: a gateway
            open for local development).
        default_agent: the agent of calls that name none.
        timeout_s: each HTTP call's timeout (``generate`` waits ``timeout_s`` more than its own).
        transport: an ``httpx`` transport (tests: ``httpx.ASGITransport``).
    """

    def __init__(self, base_url: str, *, api_key: str | None = None, default_agent: str | None = None,
                 timeout_s: float = 60.0, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.default_agent = default_agent
        self.timeout_s = timeout_s
        self._api_key = api_key
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=headers, transport=transport,
                                       timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)))
        self._started = False

    def __repr__(self) -> str:  # never the key
        return f"HttpThreadlineClient({self.base_url!r})"

    async def start(self) -> None:
        """Check that the gateway answers (``/healthz``). Raises :class:`BrokerUnavailableError`
        when it cannot be reached."""
        try:
            (await self._http.get("/healthz")).raise_for_status()
        except httpx.HTTPError as exc:
            raise BrokerUnavailableError(f"cannot reach the gateway at {self.base_url}: {type(exc).__name__}") from exc
        self._started = True

    async def stop(self) -> None:
        """Close the HTTP connections (open subscriptions end with them)."""
        self._started = False
        await self._http.aclose()

    async def __aenter__(self) -> HttpThreadlineClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- HTTP -----------------------------------------------------------------------------------
    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None, *,
                    params: dict[str, str] | None = None, timeout_s: float | None = None,
                    missing_ok: bool = False) -> Any:
        """The JSON answer of one call; ``None`` for a 404 when ``missing_ok``.

        Raises:
            RequestFailed: ingress refused the request (422 with an ingress error code).
            BrokerUnavailableError: the gateway cannot reach Kafka (503), or the gateway is unreachable.
            TimeoutError: no reply from ingress in time (504).
            GatewayError: any other refusal.
        """
        try:
            resp = await self._http.request(method, path, json=body, params=params,
                                            timeout=timeout_s if timeout_s is not None else httpx.USE_CLIENT_DEFAULT)
        except httpx.TimeoutException as exc:
            raise TimeoutError(f"{method} {path}: no answer from the gateway in time") from exc
        except httpx.TransportError as exc:
            raise BrokerUnavailableError(f"cannot reach the gateway at {self.base_url}: {type(exc).__name__}") from exc
        if resp.status_code < 400:
            return resp.json()
        if resp.status_code == 404 and missing_ok:
            return None
        try:
            err = resp.json()["error"]
            code, message = str(err["code"]), str(err["message"])
        except (ValueError, KeyError, TypeError):
            code, message = "http_error", resp.text[:200]
        if resp.status_code == 503:
            raise BrokerUnavailableError(f"gateway: {message}")
        if resp.status_code == 504:
            raise TimeoutError(f"gateway: {message}")
        if resp.status_code == 422 and code not in ("validation_failed", "invalid_json", "invalid_argument"):
            raise RequestFailed(ErrorReply(request_id="-", code=code, message=message))
        raise GatewayError(resp.status_code, code, message)

    def _thread(self, resource_id: str, thread_id: str) -> str:
        return f"/v1/resources/{_seg(resource_id)}/threads/{_seg(thread_id)}"

    def _agent(self, agent_id: str | None) -> str:
        agent = agent_id or self.default_agent
        if not agent:
            raise ValueError("agent_id is required (or set default_agent)")
        return agent

    # --- requests -------------------------------------------------------------------------------
    async def _send(self, path: str, body: dict[str, Any], *, resource_id: str, thread_id: str,
                    signal: CreatedSignal) -> SendResult:
        sent_at_ms = int(time.time() * 1000)
        answer = await self._call("POST", path, {k: v for k, v in body.items() if v is not None})
        persisted = answer.pop("persisted", None)
        reply = REPLY_ADAPTER.validate_python(answer)
        if isinstance(reply, Accepted):
            if reply.signal is not None:
                signal.update(reply.signal)
            if reply.signal_id:
                signal.id = reply.signal_id
            if reply.action == "wake" and reply.run_id:
                reply._output = self.run_output(reply.run_id, resource_id=resource_id, thread_id=thread_id,
                                                sent_at_ms=sent_at_ms)
        return SendResult(reply.request_id, resolved(reply),
                          resolved(REPLY_ADAPTER.validate_python(persisted)) if persisted else None, signal, sent_at_ms)

    def run_output(self, run_id: str, *, resource_id: str, thread_id: str, sent_at_ms: int) -> RunOutput:
        """A :class:`RunOutput` on run ``run_id`` (its chunks over SSE, from ``sent_at_ms`` on)."""
        return RunOutput(run_id, lambda from_ms, after: self.subscribe_to_thread(
            resource_id, thread_id, from_time_ms=from_ms, after=after), sent_at_ms)

    async def send_message(self, message: Any, *, resource_id: str, thread_id: str, agent_id: str | None = None,
                           run_id: str | None = None, if_active: dict[str, Any] | None = None,
                           if_idle: dict[str, Any] | None = None) -> SendResult:
        """``sendMessage``: ``POST …/messages``."""
        body = {"message": message, "agent_id": self._agent(agent_id), "run_id": run_id, "if_active": if_active,
                "if_idle": if_idle}
        return await self._send(f"{self._thread(resource_id, thread_id)}/messages", body, resource_id=resource_id,
                                thread_id=thread_id, signal=_signal("user", message))

    async def queue_message(self, message: Any, *, resource_id: str, thread_id: str,
                            agent_id: str | None = None, if_idle: dict[str, Any] | None = None) -> SendResult:
        """``queueMessage``: ``POST …/queue``."""
        body = {"message": message, "agent_id": self._agent(agent_id), "if_idle": if_idle}
        return await self._send(f"{self._thread(resource_id, thread_id)}/queue", body, resource_id=resource_id,
                                thread_id=thread_id, signal=_signal("user", message))

    async def send_signal(self, signal: dict[str, Any], *, resource_id: str, thread_id: str,
                          agent_id: str | None = None, run_id: str | None = None,
                          if_active: dict[str, Any] | None = None, if_idle: dict[str, Any] | None = None) -> SendResult:
        """``sendSignal``: ``POST …/signals``."""
        body = {"signal": signal, "agent_id": self._agent(agent_id), "run_id": run_id, "if_active": if_active,
                "if_idle": if_idle}
        created = _signal(str(signal.get("type", "")), signal.get("contents"), signal)
        return await self._send(f"{self._thread(resource_id, thread_id)}/signals", body, resource_id=resource_id,
                                thread_id=thread_id, signal=created)

    async def send_state_signal(self, state: dict[str, Any], *, resource_id: str, thread_id: str,
                                agent_id: str | None = None, if_active: dict[str, Any] | None = None,
                                if_idle: dict[str, Any] | None = None) -> SendResult:
        """``sendStateSignal``: ``POST …/state``; ``accepted`` resolves to ``Accepted`` or ``Skipped``."""
        body = {"state": state, "agent_id": self._agent(agent_id), "if_active": if_active, "if_idle": if_idle}
        return await self._send(f"{self._thread(resource_id, thread_id)}/state", body, resource_id=resource_id,
                                thread_id=thread_id, signal=_signal("state", state.get("contents"), state))

    async def send_notification_signal(self, notification: dict[str, Any] | list[dict[str, Any]], *, resource_id: str,
                                       thread_id: str, agent_id: str | None = None,
                                       if_idle: dict[str, Any] | None = None) -> Any:
        """``sendNotificationSignal``: the ``notified`` reply (``POST …/notifications``)."""
        body = {"notifications": notification, "agent_id": self._agent(agent_id), "if_idle": if_idle}
        answer = await self._call("POST", f"{self._thread(resource_id, thread_id)}/notifications",
                                  {k: v for k, v in body.items() if v is not None})
        return REPLY_ADAPTER.validate_python(answer)

    async def stream(self, message: Any, *, resource_id: str, thread_id: str, agent_id: str | None = None,
                     options: dict[str, Any] | None = None, thread: dict[str, Any] | None = None) -> SendResult:
        """``agent.stream``: ``POST …/stream``; the chunks come on the thread's events."""
        body = {"message": message, "agent_id": self._agent(agent_id), "options": options or {}, "thread": thread}
        return await self._send(f"{self._thread(resource_id, thread_id)}/stream", body, resource_id=resource_id,
                                thread_id=thread_id, signal=_signal("user", message))

    async def generate(self, message: Any, *, resource_id: str, thread_id: str, agent_id: str | None = None,
                       options: dict[str, Any] | None = None, thread: dict[str, Any] | None = None,
                       timeout_s: float = 300.0) -> RunResult:
        """``agent.generate``: ``POST …/generate``, waits for the run's result."""
        body = {"message": message, "agent_id": self._agent(agent_id), "options": options or {}, "thread": thread,
                "timeout_s": timeout_s}
        answer = await self._call("POST", f"{self._thread(resource_id, thread_id)}/generate",
                                  {k: v for k, v in body.items() if v is not None}, timeout_s=timeout_s + self.timeout_s)
        result: RunResult = RunResult.model_validate(answer)
        return result

    async def abort(self, *, resource_id: str, thread_id: str, agent_id: str | None = None,
                    run_id: str | None = None) -> bool:
        """Abort the thread's active run (or ``run_id``); True if one was aborted (False for a
        thread that does not exist)."""
        body = {k: v for k, v in {"run_id": run_id, "agent_id": agent_id or self.default_agent}.items() if v}
        answer = await self._call("POST", f"{self._thread(resource_id, thread_id)}/abort", body, missing_ok=True)
        return bool(answer and answer.get("aborted"))

    # --- reads ----------------------------------------------------------------------------------
    async def active_run_id(self, *, resource_id: str, thread_id: str) -> str | None:
        """The thread's active run (its lease holder), else ``None``."""
        answer = await self._call("GET", f"{self._thread(resource_id, thread_id)}/active-run", missing_ok=True)
        return None if answer is None else answer.get("run_id")

    async def agent_details(self, agent_id: str) -> dict[str, Any] | None:
        """``{id, name, description, metadata, dynamic_metadata, memory}``, or ``None`` for an unknown id."""
        found: dict[str, Any] | None = await self._call("GET", f"/v1/agents/{_seg(agent_id)}", missing_ok=True)
        return found

    async def get_thread(self, *, resource_id: str, thread_id: str) -> dict[str, Any] | None:
        """The thread row ``{id, resource_id, title, metadata, created_at, updated_at}``, or ``None``."""
        found: dict[str, Any] | None = await self._call("GET", self._thread(resource_id, thread_id), missing_ok=True)
        return found

    async def list_threads(self, *, resource_id: str, limit: int = 100) -> list[dict[str, Any]]:
        """The resource's threads, most recently updated first (``{id, title, metadata, created_at, updated_at}``)."""
        answer = await self._call("GET", f"/v1/resources/{_seg(resource_id)}/threads", params={"limit": str(limit)})
        threads: list[dict[str, Any]] = answer["threads"]
        return threads

    async def messages(self, *, resource_id: str, thread_id: str) -> list[dict[str, Any]]:
        """The thread's stored messages, oldest first (``{id, run_id, role, type, content, created_at}``)."""
        answer = await self._call("GET", f"{self._thread(resource_id, thread_id)}/messages", missing_ok=True)
        return [] if answer is None else list(answer["messages"])

    async def runs(self, *, resource_id: str, thread_id: str) -> list[dict[str, Any]]:
        """The thread's runs, oldest first (``{run_id, agent_id, status, finish_reason, text, usage, …}``)."""
        answer = await self._call("GET", f"{self._thread(resource_id, thread_id)}/runs", missing_ok=True)
        return [] if answer is None else list(answer["runs"])

    def agent(self, agent_id: str) -> AgentHandle:
        """Mastra's Agent methods on one agent (:class:`threadline.client.AgentHandle`)."""
        from threadline.client.agent_handle import AgentHandle

        return AgentHandle(self, agent_id)

    # --- the inbox ------------------------------------------------------------------------------
    async def inbox(self, *, resource_id: str, thread_id: str, status: str | None = None) -> list[dict[str, Any]]:
        """The thread's notification records, oldest first, no payload (``GET …/inbox``)."""
        answer = await self._call("GET", f"{self._thread(resource_id, thread_id)}/inbox",
                                  params={"status": status} if status else None, missing_ok=True)
        return [] if answer is None else list(answer["records"])

    async def read_notification(self, record_id: str, *, resource_id: str, thread_id: str) -> dict[str, Any] | None:
        """One record with its ``payload`` and ``metadata``; ``None`` if there is none."""
        found: dict[str, Any] | None = await self._call(
            "GET", f"{self._thread(resource_id, thread_id)}/inbox/{_seg(record_id)}", missing_ok=True)
        return found

    async def mark_notification(self, record_id: str, status: str, *, resource_id: str,
                                thread_id: str) -> dict[str, Any] | None:
        """Mark a record ``seen``, ``dismissed`` or ``archived``; the record, or ``None`` when there
        is none. Raises ``ValueError`` for another status."""
        if status not in ("seen", "dismissed", "archived"):
            raise ValueError(f"status must be seen, dismissed or archived, not {status!r}")
        found: dict[str, Any] | None = await self._call(
            "POST", f"{self._thread(resource_id, thread_id)}/inbox/{_seg(record_id)}", {"status": status},
            missing_ok=True)
        return found

    # --- streams --------------------------------------------------------------------------------
    async def subscribe_to_thread(self, resource_id: str, thread_id: str, *, from_beginning: bool = False,
                                  from_offset: int | None = None, after: dict[str, int] | None = None,
                                  hide_signals: bool | list[str] = False,
                                  from_time_ms: int | None = None) -> HttpThreadSubscription:
        """Follow the thread's stream over SSE (``GET …/events``); the arguments as
        :meth:`ThreadlineClient.subscribe_to_thread`. Its position is fixed when this returns; a
        thread that does not exist yet is waited for and then read from its first chunk."""
        sub = HttpThreadSubscription(
            self._http, f"{self._thread(resource_id, thread_id)}/events", from_beginning=from_beginning,
            from_offset=from_offset, from_time_ms=from_time_ms, after=after, hide_signals=hide_signals,
            on_abort=lambda: self.abort(resource_id=resource_id, thread_id=thread_id),
            on_active=lambda: self.active_run_id(resource_id=resource_id, thread_id=thread_id))
        await sub.start()
        return sub


def _signal(kind: str, contents: Any, source: dict[str, Any] | None = None) -> CreatedSignal:
    """The :class:`CreatedSignal` as the client knows it before the gateway answers (its id
    and stored fields come with the answer)."""
    if isinstance(contents, dict) and kind == "user":  # a message {role?, content, attributes?, metadata?}
        source, contents = contents, contents.get("content")
    src = source or {}
    return CreatedSignal(id="", type=kind, contents=contents, attributes=dict(src.get("attributes") or {}),
                         metadata=dict(src.get("metadata") or {}), created_at=now_iso(),
                         tag_name=src.get("tag_name") or src.get("tagName"))
