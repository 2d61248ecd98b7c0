"""``ThreadlineClient``: Mastra's Agent thread API, over a transport.

    async with ThreadlineClient() as tl:            # Kafka, settings from THREADLINE_*
        sub = await tl.subscribe_to_thread("user-123", "thread-abc")
        result = await tl.send_message("hi", agent_id="support-agent",
                                       resource_id="user-123", thread_id="thread-abc")
        accepted = await result.accepted          # {action: "wake", run_id: ...}
        async for chunk in sub.stream: ...

Every verb is written once here; the transport moves requests, chunks and rows
(:mod:`threadline.client.transport`): :class:`~threadline.client.kafka_transport.KafkaTransport`
(the default), :class:`~threadline.client.http_transport.HttpTransport` (the gateway,
``ThreadlineClient.connect_http(url, api_key=…)``) or
:class:`~threadline.client.memory_transport.MemoryTransport` (in process, for unit tests).

Every send builds its typed ingress request here, so a malformed one raises pydantic's
``ValidationError`` (a ``ValueError``) before anything is sent, whatever the transport.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from threadline.client.results import BrokerUnavailableError, RequestFailed, SendResult
from threadline.client.run_output import RunOutput
from threadline.client.sending import SignalRequest, answer, as_is, checked, given, identified, slots, with_signal
from threadline.client.transport import Follow, Subscription, Transport
from threadline.events import (
    AbortRequest,
    Accepted,
    Generate,
    Notified,
    QueueMessage,
    RunResult,
    SendMessage,
    SendNotificationSignal,
    SendSignal,
    SendStateSignal,
    Skipped,
    Stream,
    ToolApprovalRequest,
    ToolCallResolved,
)
from threadline.events.base import Event
from threadline.events.options import HideSignals, split_caller_options
from threadline.events.rows import AgentDetails, InboxRecord, MessageRow, RunRow, ScoreRow, ThreadDetails, ThreadSummary

if TYPE_CHECKING:
    import httpx

    from threadline.client.agent_handle import AgentHandle
    from threadline.config import Settings

_Reply = TypeVar("_Reply")

__all__ = ["BrokerUnavailableError", "HttpThreadlineClient", "RequestFailed", "SendResult", "ThreadlineClient"]


class ThreadlineClient:
    """Mastra's Agent thread API (send, stream, generate, abort, subscribe, read) over ``transport``.

    Args:
        settings: for the default transport, :class:`~threadline.client.kafka_transport.KafkaTransport`
            (default: ``THREADLINE_*``); not with ``transport``.
        transport: where requests, chunks and reads go (:class:`~threadline.client.transport.Transport`).
        default_agent: the agent of calls that name none.

    Raises:
        ValueError: both ``settings`` and ``transport``.
    """

    def __init__(self, settings: Settings | None = None, *, transport: Transport | None = None,
                 default_agent: str | None = None) -> None:
        if transport is None:
            from threadline.client.kafka_transport import KafkaTransport

            transport = KafkaTransport(settings)
        elif settings is not None:
            raise ValueError("settings configure the default transport: pass them to the transport instead")
        self.transport = transport
        self.default_agent = default_agent
        self._started = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.transport!r})"

    @property
    def settings(self) -> Settings | None:
        """The transport's settings (``None`` for a transport that reads none, e.g. over HTTP)."""
        found: Settings | None = getattr(self.transport, "settings", None)
        return found

    @staticmethod
    def connect_http(base_url: str, *, api_key: str | None = None, default_agent: str | None = None,
                     timeout_s: float = 60.0) -> HttpThreadlineClient:
        """This client over the HTTP gateway, with a URL and an API key (or JWT) only: no Kafka,
        no PostgreSQL, no settings read (docs/gateway.md): ``async with
        ThreadlineClient.connect_http(url, api_key=key) as tl: ...``."""
        return HttpThreadlineClient(base_url, api_key=api_key, default_agent=default_agent, timeout_s=timeout_s)

    async def start(self) -> None:
        """Connect the transport (once; again after :meth:`stop`).

        Raises:
            BrokerUnavailableError: the cluster (broker, or gateway) cannot be reached in time.
        """
        if self._started:
            return
        await self.transport.start()
        self._started = True

    async def stop(self) -> None:
        """Disconnect (idempotent)."""
        if not self._started:
            return
        self._started = False
        await self.transport.stop()

    async def __aenter__(self) -> ThreadlineClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- requests -------------------------------------------------------------------------------
    async def publish(self, request: Event) -> None:
        """Send a raw ingress request (an event of :mod:`threadline.events`) without waiting for
        its reply (over Kafka: the ingress topic, keyed by its thread; over HTTP: its endpoint).

        Raises:
            BrokerUnavailableError: not acknowledged in time (it may still arrive, and is then handled once).
        """
        await self.transport.request(request, {})

    def _agent(self, agent_id: str | None) -> str:
        agent = agent_id or self.default_agent
        if not agent:
            raise ValueError("agent_id is required (or set default_agent)")
        return agent

    async def _send(self, request: SignalRequest, kinds: tuple[str, ...] = ("accepted",), *,
                    hide_signals: HideSignals = False) -> SendResult:
        """Send a request that creates a signal; the :class:`SendResult` once the transport took it
        (a woken run's ``output`` hides the signal echoes ``hide_signals`` names)."""
        request, signal = with_signal(request)
        sent_at_ms = int(time.time() * 1000)
        sent = await self.transport.request(request, slots(request, kinds))

        def answered(reply: _Reply) -> _Reply:
            if isinstance(reply, Accepted):
                if reply.signal is not None:
                    signal.update(reply.signal)
                if reply.signal_id:
                    signal.id = reply.signal_id
                if reply.action == "wake" and reply.run_id:
                    reply._output = self.run_output(reply.run_id, resource_id=request.resource_id,
                                                    thread_id=request.thread_id, sent_at_ms=sent_at_ms,
                                                    hide_signals=hide_signals)
            return reply

        timeout_s = self.transport.reply_timeout_s
        persisted = sent.replies.get("persisted")
        return SendResult(sent.request_id, checked(sent.replies["accepted"], timeout_s, answered),
                          checked(persisted, timeout_s, as_is) if persisted is not None else None, signal, sent_at_ms)

    async def _ask(self, request: Event, slot: str) -> Any:
        """Send a request whose one reply ``slot`` answers it; that reply.

        Raises:
            RequestFailed: an error reply. TimeoutError: none within ``reply_timeout_s``.
        """
        sent = await self.transport.request(identified(request), {slot: (slot,)})
        return answer(await asyncio.wait_for(sent.replies[slot], self.transport.reply_timeout_s))

    def _objects(self, options: Mapping[str, object] | None) -> dict[str, object]:
        """Run options with call-level processors, hooks and ``prepare_step`` given as objects
        replaced by references to the agents module (decision 73); as given when the transport
        names no agents module (the gateway encodes them).

        Raises:
            ConfigurationError: an object the agents module does not define at module level.
        """
        module = self.transport.agents_module
        if not options or module is None:
            return dict(options or {})
        from threadline.runtime.refs import encode

        return encode(options, module)

    def _idle(self, if_idle: Mapping[str, object] | None) -> Mapping[str, object] | None:
        """``if_idle`` with its ``stream_options`` / ``streamOptions`` objects as references."""
        if not if_idle:
            return if_idle
        key = "stream_options" if "stream_options" in if_idle else "streamOptions"
        options = if_idle.get(key)
        return {**if_idle, key: self._objects(options)} if isinstance(options, Mapping) and options else if_idle

    def run_output(self, run_id: str, *, resource_id: str, thread_id: str, sent_at_ms: int,
                   hide_signals: HideSignals = False, after_seq: int | None = None) -> RunOutput:
        """A :class:`RunOutput` on run ``run_id`` of the thread, whose request was sent at
        ``sent_at_ms`` (its chunks are read from the thread's stream written since, without the
        signal echoes ``hide_signals`` names: ``True`` all, or a list of signal types; and
        without its chunks up to ``after_seq``)."""
        return RunOutput(run_id, lambda from_ms, after: self.subscribe_to_thread(
            resource_id, thread_id, from_time_ms=from_ms, after=after, hide_signals=hide_signals), sent_at_ms,
            after_seq=after_seq)

    async def send_message(self, message: object, *, resource_id: str, thread_id: str, agent_id: str | None = None,
                           run_id: str | None = None, if_active: Mapping[str, object] | None = None,
                           if_idle: Mapping[str, object] | None = None) -> SendResult:
        """``sendMessage``: deliver into the active run, or wake the idle thread.

        ``message``: a string, a list of parts, or ``{contents, attributes?, metadata?, provider_options?}``.
        """
        req = SendMessage(agent_id=self._agent(agent_id), resource_id=resource_id, thread_id=thread_id,
                          message=message, run_id=run_id, **given(if_active=if_active, if_idle=self._idle(if_idle)))
        return await self._send(req)

    async def send_signal(self, signal: Mapping[str, object], *, resource_id: str, thread_id: str,
                          agent_id: str | None = None, run_id: str | None = None,
                          if_active: Mapping[str, object] | None = None,
                          if_idle: Mapping[str, object] | None = None) -> SendResult:
        """``sendSignal``: system context (``{type, contents, tag_name?, attributes?, metadata?}``)."""
        req = SendSignal(agent_id=self._agent(agent_id), resource_id=resource_id, thread_id=thread_id,
                         signal=signal, run_id=run_id, **given(if_active=if_active, if_idle=if_idle))
        return await self._send(req)

    async def send_state_signal(self, state: Mapping[str, object], *, resource_id: str, thread_id: str,
                                agent_id: str | None = None, if_active: Mapping[str, object] | None = None,
                                if_idle: Mapping[str, object] | None = None) -> SendResult:
        """``sendStateSignal``: the lane's new value (``{id, cache_key, contents, mode?, value?|delta?}``).

        Returns once ingress answered, as Mastra's ``await agent.sendStateSignal(...)``: a
        :class:`SendResult` whose ``accepted`` is resolved, or, when the cache key and mode are
        already the lane's current value (nothing sent), one with ``skipped`` True, ``reason``
        ``"unchanged"`` and no ``signal`` (its ``accepted`` resolves to the ``Skipped`` reply).

        Raises:
            RequestFailed: an error reply. TimeoutError: no reply within ``reply_timeout_s``.
        """
        req = SendStateSignal(agent_id=self._agent(agent_id), resource_id=resource_id, thread_id=thread_id,
                              state=state, **given(if_active=if_active, if_idle=if_idle))
        result = await self._send(req, ("accepted", "skipped"))
        reply = await result.accepted
        if isinstance(reply, Skipped):
            return replace(result, skipped=True, reason=reply.reason, signal=None)
        return result

    async def send_notification_signal(self, notification: Mapping[str, object] | list[dict[str, object]], *,
                                       resource_id: str,
                                       thread_id: str, agent_id: str | None = None,
                                       if_idle: Mapping[str, object] | None = None) -> Notified:
        """``sendNotificationSignal``: store or merge inbox records and apply the delivery policy.

        Returns the ``notified`` reply: per notification ``{record, decision, run_id?, signal?,
        accepted?, persisted?, output?}`` (Mastra's result: ``record`` the stored record's fields
        that hold a value, ``decision`` ``{action, reason?}`` (a policy's has the reason it gave),
        ``signal`` the created signal,
        ``persisted`` ``{signal_id}`` when it was stored on the idle thread, and on ``wake``
        ``output``, a :class:`RunOutput` on the woken run, as Mastra's ``accepted.output``).
        Raises :class:`RequestFailed` on an error reply.
        """
        items = notification if isinstance(notification, list) else [notification]
        req = SendNotificationSignal(agent_id=self._agent(agent_id), resource_id=resource_id, thread_id=thread_id,
                                     notifications=items, **given(if_idle=if_idle))
        sent_at_ms = int(time.time() * 1000)
        reply: Notified = await self._ask(req, "notified")
        for result in reply.results:
            accepted = result.get("accepted") or {}
            if accepted.get("action") == "wake" and accepted.get("run_id"):
                result["output"] = self.run_output(accepted["run_id"], resource_id=resource_id,
                                                   thread_id=thread_id, sent_at_ms=sent_at_ms)
        return reply

    async def queue_message(self, message: object, *, resource_id: str, thread_id: str,
                            agent_id: str | None = None, if_idle: Mapping[str, object] | None = None) -> SendResult:
        """``queueMessage``: the next turn after the active run, or a run now."""
        req = QueueMessage(agent_id=self._agent(agent_id), resource_id=resource_id, thread_id=thread_id,
                           message=message, **given(if_idle=self._idle(if_idle)))
        return await self._send(req)

    async def stream(self, message: object, *, resource_id: str, thread_id: str, agent_id: str | None = None,
                     options: Mapping[str, object] | None = None, thread: Mapping[str, object] | None = None) -> SendResult:
        """``agent.stream(message, {memory: {resource, thread}})``; chunks go to the thread's stream.

        ``options`` may hold ``hideSignals`` / ``hide_signals`` (``True``, or a list of signal
        types): the woken run's ``accepted.output`` then leaves out those signal echo chunks
        (``data-user-message``, ``data-signal``), as Mastra's ``hideSignals`` filters the call's own
        stream; the option is not sent, and a thread subscription still sees every chunk.

        Raises:
            ValueError: ``hide_signals`` neither a bool nor a list of strings.
        """
        run_options, hide = split_caller_options(options)
        req = Stream(agent_id=self._agent(agent_id), resource_id=resource_id, thread_id=thread_id,
                     message=message, options=self._objects(run_options), thread=thread)
        return await self._send(req, hide_signals=hide)

    async def generate(self, message: object, *, resource_id: str, thread_id: str, agent_id: str | None = None,
                       options: Mapping[str, object] | None = None, thread: Mapping[str, object] | None = None,
                       timeout_s: float = 300.0) -> RunResult:
        """``agent.generate(...)``: waits for the run's result (text, usage, finish reason, steps).
        ``hideSignals`` in ``options`` is accepted and not sent (the result holds no signal echo).

        Raises:
            RequestFailed: an error reply. TimeoutError: no ``accepted`` within ``reply_timeout_s``,
                or no result within ``timeout_s``.
        """
        run_options, _ = split_caller_options(options)
        req, _ = with_signal(Generate(agent_id=self._agent(agent_id), resource_id=resource_id, thread_id=thread_id,
                                      message=message, options=self._objects(run_options), thread=thread))
        sent = await self.transport.request(req, {"accepted": ("accepted",), "result": ("result",)}, wait_s=timeout_s)
        if "accepted" in sent.replies:  # over HTTP, the result is the answer
            answer(await asyncio.wait_for(sent.replies["accepted"], self.transport.reply_timeout_s))
        result: RunResult = answer(await asyncio.wait_for(sent.replies["result"], timeout_s))
        return result

    async def abort(self, *, resource_id: str, thread_id: str, agent_id: str | None = None,
                    run_id: str | None = None) -> bool:
        """Abort the thread's active run (or ``run_id``); True if a run was aborted (False for a
        thread with none, or none at all). What is queued behind the run still runs. Mastra:
        ``subscription.abort()``."""
        req = AbortRequest(agent_id=agent_id or self.default_agent or "-", resource_id=resource_id,
                           thread_id=thread_id, run_id=run_id)
        return bool((await self._ask(req, "aborted")).aborted)

    async def approve_tool_call(self, *, resource_id: str, thread_id: str, run_id: str, tool_call_id: str,
                                agent_id: str | None = None) -> ToolCallResolved:
        """Approve the call ``tool_call_id`` the run ``run_id`` holds for approval (Mastra's
        ``approveToolCall``): the tool runs once and the run goes on (its chunks on the thread's
        stream). Approving twice runs it once: the second reply says ``resolved: false``.

        Raises:
            RequestFailed: the thread belongs to another resource. TimeoutError: no reply within
                ``reply_timeout_s``.
        """
        return await self._answer(resource_id, thread_id, run_id, tool_call_id, agent_id, approved=True)

    async def decline_tool_call(self, *, resource_id: str, thread_id: str, run_id: str, tool_call_id: str,
                                agent_id: str | None = None, reason: str | None = None) -> ToolCallResolved:
        """Decline the held call (Mastra's ``declineToolCall``): the tool never runs; the model
        reads ``reason`` (default "Tool call was not approved by the user") as its result and
        the run goes on. Raises as :meth:`approve_tool_call`."""
        return await self._answer(resource_id, thread_id, run_id, tool_call_id, agent_id, approved=False,
                                  reason=reason)

    async def _answer(self, resource_id: str, thread_id: str, run_id: str, tool_call_id: str, agent_id: str | None,
                      *, approved: bool, reason: str | None = None) -> ToolCallResolved:
        req = ToolApprovalRequest(agent_id=agent_id or self.default_agent or "-", resource_id=resource_id,
                                  thread_id=thread_id, run_id=run_id, tool_call_id=tool_call_id, approved=approved,
                                  reason=reason)
        resolved: ToolCallResolved = await self._ask(req, "resolved")
        return resolved

    def agent(self, agent_id: str) -> AgentHandle:
        """A handle on one agent with Mastra's Agent methods (``send_message``, ``generate``, …),
        so Mastra code ports line for line (:class:`threadline.client.AgentHandle`)."""
        from threadline.client.agent_handle import AgentHandle

        return AgentHandle(self, agent_id)

    # --- reads (the transport's read model) -----------------------------------------------------
    async def active_run_id(self, *, resource_id: str, thread_id: str) -> str | None:
        """The thread's active run: the run holding its unexpired lease, else ``None`` (also for
        a thread of another resource, or none at all)."""
        found: str | None = await self.transport.read("active_run", resource_id=resource_id, thread_id=thread_id)
        return found

    async def agent_details(self, agent_id: str) -> AgentDetails | None:
        """What the cluster's ingress published of one agent: ``{id, name, description, metadata,
        dynamic_metadata, memory, voice}`` (``metadata`` is ``{}`` and ``dynamic_metadata`` true
        when the agent's metadata is a function of the request context), or ``None`` for an unknown id."""
        found: AgentDetails | None = await self.transport.read("agent", agent_id=agent_id)
        return found

    async def get_thread(self, *, resource_id: str, thread_id: str) -> ThreadDetails | None:
        """The thread row ``{id, resource_id, title, metadata, created_at, updated_at}`` (set by
        ``generate`` / ``stream`` with ``thread={title, metadata}``), or ``None`` when the
        resource has no such thread."""
        found: ThreadDetails | None = await self.transport.read("thread", resource_id=resource_id,
                                                                 thread_id=thread_id)
        return found

    async def list_threads(self, *, resource_id: str, limit: int = 100) -> list[ThreadSummary[str]]:
        """The resource's threads, most recently updated first (``{id, title, metadata,
        created_at, updated_at}``; ``limit`` 1..1000)."""
        return list(await self.transport.read("threads", resource_id=resource_id, limit=limit))

    async def messages(self, *, resource_id: str, thread_id: str) -> list[MessageRow[str]]:
        """The thread's stored messages, oldest first (``{id, run_id, role, type, content, created_at}``)."""
        return list(await self.transport.read("messages", resource_id=resource_id, thread_id=thread_id))

    async def runs(self, *, resource_id: str, thread_id: str) -> list[RunRow[str]]:
        """The thread's runs, oldest first (``{run_id, agent_id, kind, status, finish_reason, text, usage, …}``)."""
        return list(await self.transport.read("runs", resource_id=resource_id, thread_id=thread_id))

    async def scores(self, run_id: str) -> list[ScoreRow]:
        """A finished run's stored scores, by scorer name: ``[{run_id, scorer, agent_id, status
        ("done" | "failed"), score, reason, error, scored_at}]``; scorers still running (or not
        sampled) are absent (decision 71). Raises :class:`~threadline.client.GatewayError` over
        the gateway, which serves no scores."""
        return list(await self.transport.read("scores", run_id=run_id))

    async def inbox(self, *, resource_id: str, thread_id: str, status: str | None = None) -> list[InboxRecord]:
        """The thread's notification records, oldest first (``status``: only those, e.g. ``pending``).
        Records as dicts (``id, source, kind, priority, status, summary, coalesced_count, …``), no payload."""
        return list(await self.transport.read("inbox", resource_id=resource_id, thread_id=thread_id, status=status))

    async def read_notification(self, record_id: str, *, resource_id: str, thread_id: str) -> InboxRecord | None:
        """One record of the thread with its ``payload`` and ``metadata``; ``None`` if there is none."""
        found: InboxRecord | None = await self.transport.read("notification", resource_id=resource_id,
                                                                 thread_id=thread_id, record_id=record_id)
        return found

    async def mark_notification(self, record_id: str, status: str, *, resource_id: str,
                                thread_id: str) -> InboxRecord | None:
        """Mark a record ``seen``, ``dismissed`` or ``archived``; returns it, or ``None`` if the thread
        has no such record. Raises ``ValueError`` for another status."""
        if status not in ("seen", "dismissed", "archived"):
            raise ValueError(f"status must be seen, dismissed or archived, not {status!r}")
        found: InboxRecord | None = await self.transport.read("mark", resource_id=resource_id, thread_id=thread_id,
                                                                 record_id=record_id, status=status)
        return found

    async def mark_seen(self, record_id: str, *, resource_id: str, thread_id: str) -> InboxRecord | None:
        """The record marked ``seen`` (Mastra's ``markSeen``); ``None`` if the thread has no such record."""
        return await self.mark_notification(record_id, "seen", resource_id=resource_id, thread_id=thread_id)

    async def dismiss(self, record_id: str, *, resource_id: str, thread_id: str) -> InboxRecord | None:
        """The record marked ``dismissed``; ``None`` if the thread has no such record."""
        return await self.mark_notification(record_id, "dismissed", resource_id=resource_id, thread_id=thread_id)

    async def archive(self, record_id: str, *, resource_id: str, thread_id: str) -> InboxRecord | None:
        """The record marked ``archived``; ``None`` if the thread has no such record."""
        return await self.mark_notification(record_id, "archived", resource_id=resource_id, thread_id=thread_id)

    # --- streams --------------------------------------------------------------------------------
    async def subscribe_to_thread(self, resource_id: str, thread_id: str, *, from_beginning: bool = False,
                                  from_offset: int | None = None,
                                  after: dict[str, int] | None = None,
                                  hide_signals: bool | list[str] = False,
                                  from_time_ms: int | None = None) -> Subscription:
        """Follow the thread's chunks (over Kafka its chunk topic, created now if it does not
        exist yet; over HTTP the gateway's SSE). The position is fixed when this returns.

        Args:
            from_beginning: replay the thread's retained stream (every run) first.
            from_offset: start at this offset of the thread's stream.
            after: ``{run_id: seq}`` already seen (a previous subscription's ``cursor()``):
                those chunks are not shown again.
            hide_signals: hide the signal echo chunks (all, or of the listed signal types).
            from_time_ms: start at the first chunk written at or after this time (ms since the epoch).

        The subscription's ``await active_run_id()`` is this client's :meth:`active_run_id`, and
        its ``await abort()`` this client's :meth:`abort`.
        """
        follow = Follow(from_beginning=from_beginning, from_offset=from_offset, from_time_ms=from_time_ms,
                        after=after, hide_signals=hide_signals,
                        on_abort=lambda: self.abort(resource_id=resource_id, thread_id=thread_id),
                        on_active=lambda: self.active_run_id(resource_id=resource_id, thread_id=thread_id))
        return await self.transport.subscribe(resource_id, thread_id, follow)


class HttpThreadlineClient(ThreadlineClient):
    """:class:`ThreadlineClient` over the gateway's HTTP API (a constructor, nothing more).

    Args:
        base_url: the gateway, e.g. ``http://127.0.0.1:18000``.
        api_key: an API key or a JWT, sent as ``Authorization: Bearer …`` (``None``: a gateway
            open for local development).
        default_agent: the agent of calls that name none.
        timeout_s: each HTTP call's timeout (``generate`` waits ``timeout_s`` more than its own).
        transport: an ``httpx`` transport (tests: ``httpx.MockTransport`` / ``ASGITransport``).
    """

    def __init__(self, base_url: str, *, api_key: str | None = None, default_agent: str | None = None,
                 timeout_s: float = 60.0, transport: httpx.AsyncBaseTransport | None = None) -> None:
        from threadline.client.http_transport import HttpTransport

        http = HttpTransport(base_url, api_key=api_key, timeout_s=timeout_s, transport=transport)
        super().__init__(transport=http, default_agent=default_agent)
        self.base_url = http.base_url
        self.timeout_s = timeout_s
