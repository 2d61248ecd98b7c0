"""``ThreadlineClient``: Mastra's Agent thread API over Kafka.

    async with ThreadlineClient() as tl:
        sub = await tl.subscribe_to_thread("user-123", "thread-abc")
        result = await tl.send_message("hi", agent_id="support-agent",
                                       resource_id="user-123", thread_id="thread-abc")
        accepted = await result.accepted          # {action: "wake", run_id: ...}
        async for chunk in sub.stream: ...
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiokafka.errors import KafkaError

from threadline.client.inbox_marks import InboxMarks
from threadline.client.replies import ReplyListener
from threadline.client.results import BrokerUnavailableError, RequestFailed, SendResult
from threadline.client.run_output import CreatedSignal, RunOutput
from threadline.client.subscription import ThreadSubscription
from threadline.config import Settings, get_settings
from threadline.events import (
    AbortRequest,
    Accepted,
    ErrorReply,
    Generate,
    QueueMessage,
    RunResult,
    SendMessage,
    SendNotificationSignal,
    SendSignal,
    SendStateSignal,
    Stream,
)
from threadline.events.base import Event
from threadline.events.messages import now_iso
from threadline.ids import new_id
from threadline.kafka.admin import TopicAdmin
from threadline.kafka.producer import Producer
from threadline.kafka.security import client_kwargs
from threadline.ops import tracing
from threadline.store.payloads import PayloadStore
from threadline.topics import Topics, thread_key

if TYPE_CHECKING:
    from threadline.client.agent_handle import AgentHandle
    from threadline.client.http import HttpThreadlineClient


class ThreadlineClient(InboxMarks):
    """Publishes requests to the ingress topic and reads replies and chunk topics."""

    def __init__(self, settings: Settings | None = None, *, default_agent: str | None = None) -> None:
        self.settings = settings or get_settings()
        self.topics = Topics(self.settings.topic_prefix)
        self.default_agent = default_agent
        # bodies over max_record_bytes (a message of several MB) go to Postgres by reference
        # (docs/decisions.md#payloads-by-reference); the connection is opened only when one is met
        self._payloads = PayloadStore(dsn=self.settings.pg_dsn, statement_cache=self.settings.pg_use_statement_cache)
        tracing.configure("client")  # on only with OTEL_EXPORTER_OTLP_ENDPOINT / THREADLINE_TRACE_FILE, or an app's own SDK
        self._security = client_kwargs(self.settings)  # TLS / SASL (docs/operations.md)
        self._producer = Producer(self.settings.kafka_bootstrap, client_id="threadline-client", linger_ms=0,
                                  max_record_bytes=self.settings.max_record_bytes,
                                  spill=lambda body, topic: self._payloads.put(body, topic=topic),
                                  security=self._security)
        self._admin = TopicAdmin(self.settings.kafka_bootstrap, security=self._security,  # chunk topics may be deleted
                                 replication_factor=self.settings.replication_factor, recheck=True)  # (decision 41)
        self._replies = ReplyListener(self.settings.kafka_bootstrap, self.topics.replies, payloads=self._payloads,
                                      security=self._security)
        self._started = False

    @staticmethod
    def connect_http(base_url: str, *, api_key: str | None = None, default_agent: str | None = None,
                     timeout_s: float = 60.0) -> HttpThreadlineClient:
        """The same public API over the HTTP gateway, with a URL and an API key (or JWT) only: no
        Kafka, no PostgreSQL, no settings read (:class:`threadline.client.http.HttpThreadlineClient`;
        docs/gateway.md). Use it as this client: ``async with ThreadlineClient.connect_http(url,
        api_key=key) as tl: ...``."""
        from threadline.client.http import HttpThreadlineClient

        return HttpThreadlineClient(base_url, api_key=api_key, default_agent=default_agent, timeout_s=timeout_s)

    async def start(self) -> None:
        """Connect to the broker. Raises :class:`BrokerUnavailableError` when it cannot be
        reached within ``reply_timeout_s``."""
        if self._started:
            return
        try:
            await asyncio.wait_for(self._connect(), self.settings.reply_timeout_s)
        except (TimeoutError, KafkaError, OSError) as exc:
            await self._close(2.0)
            raise BrokerUnavailableError(f"cannot reach the Kafka broker at {self.settings.kafka_bootstrap}: "
                                         f"{type(exc).__name__} {exc}".rstrip()) from exc
        self._started = True

    async def _connect(self) -> None:
        await self._producer.start()
        await self._admin.start()
        await self._admin.ensure(self.topics.internal(), partitions=self.settings.partitions)
        await self._replies.start()

    async def stop(self) -> None:
        """Disconnect; with the broker away, every part gets a few seconds, then is left behind."""
        if not self._started:
            return
        self._started = False
        await self._close(3.0)

    async def _close(self, each_s: float) -> None:
        for close in (self._replies.stop, self._admin.stop, self._producer.stop, self._payloads.close):
            with contextlib.suppress(Exception):  # TimeoutError included: the broker is away
                await asyncio.wait_for(close(), each_s)

    async def __aenter__(self) -> ThreadlineClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- requests -------------------------------------------------------------------------------
    async def publish(self, request: Event) -> None:
        """Publish a raw request event to the ingress topic, keyed by its thread."""
        key = thread_key(request.resource_id, request.thread_id)  # type: ignore[attr-defined]  # every ingress request has both
        timeout_s = self.settings.reply_timeout_s
        try:
            with tracing.span(f"{self.topics.ingress} publish", **{  # the root of the request's trace
                    "messaging.system": "kafka", "messaging.destination.name": self.topics.ingress,
                    "threadline.request": getattr(request, "type", None), "threadline.thread_id": key}):
                await asyncio.wait_for(self._producer.publish(self.topics.ingress, request, key=key), timeout_s)
        except (TimeoutError, KafkaError) as exc:
            raise BrokerUnavailableError(
                f"request {request.event_id} not acknowledged by the Kafka broker within {timeout_s:g} s "
                f"({type(exc).__name__}); it may still be delivered later and is then handled once") from exc

    def _agent(self, agent_id: str | None) -> str:
        agent = agent_id or self.default_agent
        if not agent:
            raise ValueError("agent_id is required (or set default_agent)")
        return agent

    async def _send(self, request: Any, kinds: tuple[str, ...] = ("accepted",)) -> SendResult:
        request, signal = _with_signal(request)
        accepted = self._replies.expect(request.event_id, kinds[0]) if len(kinds) == 1 \
            else self._replies.expect_first(request.event_id, kinds)
        persisted = self._replies.expect(request.event_id, "persisted") \
            if getattr(getattr(request, "if_idle", None), "behavior", None) == "persist" \
            or getattr(getattr(request, "if_active", None), "behavior", None) == "persist" else None
        sent_at_ms = int(time.time() * 1000)
        await self.publish(request)

        def answered(reply: Any) -> Any:
            if isinstance(reply, Accepted):
                if reply.signal is not None:
                    signal.update(reply.signal)
                if reply.action == "wake" and reply.run_id:
                    reply._output = self.run_output(reply.run_id, resource_id=request.resource_id,
                                                    thread_id=request.thread_id, sent_at_ms=sent_at_ms)
            return reply

        return SendResult(request.event_id, _checked(accepted, self.settings.reply_timeout_s, answered),
                          _checked(persisted, self.settings.reply_timeout_s) if persisted else None, signal,
                          sent_at_ms)

    def _objects(self, options: dict[str, Any] | None) -> dict[str, Any]:
        """Run options with call-level processors, hooks and ``prepare_step`` given as objects
        replaced by references to the agents module (decision 73).

        Raises:
            ConfigurationError: an object the agents module does not define at module level.
        """
        from threadline.runtime.refs import encode

        return encode(options, self.settings.agents_module) if options else {}

    def _idle(self, if_idle: dict[str, Any] | None) -> dict[str, Any] | None:
        """``if_idle`` with its ``stream_options`` / ``streamOptions`` objects as references."""
        if not if_idle:
            return if_idle
        key = "stream_options" if "stream_options" in if_idle else "streamOptions"
        return {**if_idle, key: self._objects(if_idle[key])} if if_idle.get(key) else if_idle

    def run_output(self, run_id: str, *, resource_id: str, thread_id: str, sent_at_ms: int) -> RunOutput:
        """A :class:`RunOutput` on run ``run_id`` of the thread, whose request was sent at
        ``sent_at_ms`` (its chunks are read from the chunk topic's records written since)."""
        return RunOutput(run_id, lambda from_ms, after: self.subscribe_to_thread(
            resource_id, thread_id, from_time_ms=from_ms, after=after), sent_at_ms)

    async def send_message(self, message: Any, *, resource_id: str, thread_id: str, agent_id: str | None = None,
                           run_id: str | None = None, if_active: dict[str, Any] | None = None,
                           if_idle: dict[str, Any] | None = None) -> SendResult:
        """``sendMessage``: deliver into the active run, or wake the idle thread."""
        req = SendMessage(agent_id=self._agent(agent_id), resource_id=resource_id, thread_id=thread_id,
                          message=message, run_id=run_id, **_opts(if_active=if_active, if_idle=self._idle(if_idle)))
        return await self._send(req)

    async def send_signal(self, signal: dict[str, Any], *, resource_id: str, thread_id: str,
                          agent_id: str | None = None, run_id: str | None = None,
                          if_active: dict[str, Any] | None = None, if_idle: dict[str, Any] | None = None) -> SendResult:
        """``sendSignal``: system context (``{type, contents, tag_name?, attributes?, metadata?}``)."""
        req = SendSignal(agent_id=self._agent(agent_id), resource_id=resource_id, thread_id=thread_id,
                         signal=signal, run_id=run_id, **_opts(if_active=if_active, if_idle=if_idle))
        return await self._send(req)

    async def send_state_signal(self, state: dict[str, Any], *, resource_id: str, thread_id: str,
                                agent_id: str | None = None, if_active: dict[str, Any] | None = None,
                                if_idle: dict[str, Any] | None = None) -> SendResult:
        """``sendStateSignal``: the lane's new value (``{id, cache_key, contents, mode?, value?|delta?}``).

        ``accepted`` resolves to :class:`Accepted`, or to :class:`Skipped` when the cache key and
        mode are already the lane's current value (nothing was sent).
        """
        req = SendStateSignal(agent_id=self._agent(agent_id), resource_id=resource_id, thread_id=thread_id,
                              state=state, **_opts(if_active=if_active, if_idle=if_idle))
        return await self._send(req, ("accepted", "skipped"))

    async def send_notification_signal(self, notification: dict[str, Any] | list[dict[str, Any]], *, resource_id: str,
                                       thread_id: str, agent_id: str | None = None,
                                       if_idle: dict[str, Any] | None = None) -> Any:
        """``sendNotificationSignal``: store or merge inbox records and apply the delivery policy.

        Returns the ``notified`` reply: per notification ``{record, decision, signal_id?, run_id?,
        accepted?}``.
        """
        items = notification if isinstance(notification, list) else [notification]
        req = SendNotificationSignal(agent_id=self._agent(agent_id), resource_id=resource_id, thread_id=thread_id,
                                     notifications=items, **_opts(if_idle=if_idle))
        answer = self._replies.expect(req.event_id, "notified")
        await self.publish(req)
        reply = await asyncio.wait_for(answer, self.settings.reply_timeout_s)
        if isinstance(reply, ErrorReply):
            raise RequestFailed(reply)
        return reply

    async def queue_message(self, message: Any, *, resource_id: str, thread_id: str,
                            agent_id: str | None = None, if_idle: dict[str, Any] | None = None) -> SendResult:
        """``queueMessage``: the next turn after the active run, or a run now."""
        req = QueueMessage(agent_id=self._agent(agent_id), resource_id=resource_id, thread_id=thread_id,
                           message=message, **_opts(if_idle=self._idle(if_idle)))
        return await self._send(req)

    async def stream(self, message: Any, *, resource_id: str, thread_id: str, agent_id: str | None = None,
                     options: dict[str, Any] | None = None, thread: dict[str, Any] | None = None) -> SendResult:
        """``agent.stream(message, {memory: {resource, thread}})``; chunks go to the thread's topic."""
        req = Stream(agent_id=self._agent(agent_id), resource_id=resource_id, thread_id=thread_id,
                     message=message, options=self._objects(options), thread=thread)
        return await self._send(req)

    async def generate(self, message: Any, *, resource_id: str, thread_id: str, agent_id: str | None = None,
                       options: dict[str, Any] | None = None, thread: dict[str, Any] | None = None,
                       timeout_s: float = 300.0) -> RunResult:
        """``agent.generate(...)``: waits for the run's result (text, usage, finish reason, steps)."""
        req = Generate(agent_id=self._agent(agent_id), resource_id=resource_id, thread_id=thread_id,
                       message=message, options=self._objects(options), thread=thread)
        result = self._replies.expect(req.event_id, "result")
        sent = await self._send(req)
        await sent.accepted
        reply = await asyncio.wait_for(result, timeout_s)
        if isinstance(reply, ErrorReply):
            raise RequestFailed(reply)
        return reply

    async def abort(self, *, resource_id: str, thread_id: str, agent_id: str | None = None,
                    run_id: str | None = None) -> bool:
        """Abort the thread's active run (or ``run_id``); True if a run was aborted.

        What is queued behind the run still runs. Mastra: ``subscription.abort()``.
        """
        req = AbortRequest(agent_id=agent_id or self.default_agent or "-", resource_id=resource_id,
                           thread_id=thread_id, run_id=run_id)
        answer = self._replies.expect(req.event_id, "aborted")
        await self.publish(req)
        reply = await asyncio.wait_for(answer, self.settings.reply_timeout_s)
        if isinstance(reply, ErrorReply):
            raise RequestFailed(reply)
        return bool(reply.aborted)

    async def active_run_id(self, *, resource_id: str, thread_id: str) -> str | None:
        """The thread's active run: the run holding its unexpired lease in PostgreSQL, else ``None``
        (also for a thread of another resource, or none at all)."""
        from threadline.store.queries import active_run

        return await self._inbox(active_run, resource_id=resource_id, thread_id=thread_id)

    async def agent_details(self, agent_id: str) -> dict[str, Any] | None:
        """What the cluster's ingress published of one agent: ``{id, name, description, metadata,
        dynamic_metadata, memory}`` (``metadata`` is ``{}`` and ``dynamic_metadata`` true when the
        agent's metadata is a function of the request context), or ``None`` for an unknown id."""
        from threadline.store.queries import read_agent

        return await self._inbox(read_agent, agent_id=agent_id)

    async def get_thread(self, *, resource_id: str, thread_id: str) -> dict[str, Any] | None:
        """The thread row ``{id, resource_id, title, metadata, created_at, updated_at}`` (set by
        ``generate`` / ``stream`` with ``thread={title, metadata}``), or ``None`` when the
        resource has no such thread."""
        from threadline.store.queries import read_thread

        return await self._inbox(read_thread, resource_id=resource_id, thread_id=thread_id)

    async def scores(self, run_id: str) -> list[dict[str, Any]]:
        """A finished run's stored scores, by scorer name: ``[{run_id, scorer, agent_id, status
        ("done" | "failed"), score, reason, error, scored_at}]``; scorers still running (or not
        sampled) are absent (decision 71)."""
        from threadline.store.scores import list_scores

        return await self._inbox(list_scores, run_id=run_id)

    def agent(self, agent_id: str) -> AgentHandle:
        """A handle on one agent with Mastra's Agent methods (``send_message``, ``generate``, …),
        so Mastra code ports line for line (:class:`threadline.client.AgentHandle`)."""
        from threadline.client.agent_handle import AgentHandle

        return AgentHandle(self, agent_id)

    # --- the inbox (read from PostgreSQL, where the notification-scheduler keeps it) ---------------
    async def _inbox(self, fn: Any, **kw: Any) -> Any:
        import asyncpg

        conn = await asyncpg.connect(self.settings.pg_dsn)
        try:
            return await fn(conn, **kw)
        finally:
            await conn.close()

    async def inbox(self, *, resource_id: str, thread_id: str, status: str | None = None) -> list[dict[str, Any]]:
        """The thread's notification records, oldest first (``status``: only those, e.g. ``pending``).
        Records as dicts (``id, source, kind, priority, status, summary, coalesced_count, …``), no payload."""
        from threadline.store import inbox_access as access

        return await self._inbox(access.list_records, resource_id=resource_id, thread_id=thread_id, status=status)

    async def read_notification(self, record_id: str, *, resource_id: str, thread_id: str) -> dict[str, Any] | None:
        """One record of the thread with its ``payload`` and ``metadata``; ``None`` if there is none."""
        from threadline.store import inbox_access as access

        return await self._inbox(access.read_record, resource_id=resource_id, thread_id=thread_id,
                                 record_id=record_id)

    async def mark_notification(self, record_id: str, status: str, *, resource_id: str,
                                thread_id: str) -> dict[str, Any] | None:
        """Mark a record ``seen``, ``dismissed`` or ``archived``; returns it, or ``None`` if the thread
        has no such record. Raises ``ValueError`` for another status."""
        from threadline.store import inbox_access as access

        return await self._inbox(access.mark, resource_id=resource_id, thread_id=thread_id, record_id=record_id,
                                 status=status)

    # --- streams --------------------------------------------------------------------------------
    async def subscribe_to_thread(self, resource_id: str, thread_id: str, *, from_beginning: bool = False,
                                  from_offset: int | None = None,
                                  after: dict[str, int] | None = None,
                                  hide_signals: bool | list[str] = False,
                                  from_time_ms: int | None = None) -> ThreadSubscription:
        """Follow the thread's chunk topic (created now if it does not exist yet).

        Args:
            from_beginning: replay the thread's retained stream (every run) first.
            from_offset: start at this Kafka offset of the chunk topic.
            after: ``{run_id: seq}`` already seen (a previous subscription's ``cursor()``):
                those chunks are not shown again.
            hide_signals: hide the signal echo chunks (all, or of the listed signal types).
            from_time_ms: start at the first chunk written at or after this time (ms since the epoch).

        The subscription's ``await active_run_id()`` asks the thread's lease in PostgreSQL.
        """
        topic = self.topics.chunks(resource_id, thread_id)
        sub = ThreadSubscription(self.settings.kafka_bootstrap, topic, from_beginning=from_beginning,
                                 from_offset=from_offset, from_time_ms=from_time_ms,
                                 on_abort=lambda: self.abort(resource_id=resource_id, thread_id=thread_id),
                                 on_active=lambda: self.active_run_id(resource_id=resource_id, thread_id=thread_id),
                                 after=after, hide_signals=hide_signals, payloads=self._payloads,
                                 security=self._security)
        # the consumer connects while the topic is made (decision 101)
        made, connected = await asyncio.gather(
            self._admin.ensure_chunk_topic(topic, retention_ms=self.settings.chunk_retention_ms), sub.connect(),
            return_exceptions=True)
        try:
            for outcome in (made, connected):
                if isinstance(outcome, BaseException):
                    raise outcome
            await sub.start(new_topic=made is True)
        except BaseException:
            await sub.unsubscribe()
            raise
        return sub


def _opts(**kw: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in kw.items() if v is not None}


def _checked(fut: asyncio.Future[Any], timeout_s: float,
             then: Callable[[Any], Any] | None = None) -> asyncio.Future[Any]:
    async def wait() -> Any:
        reply = await asyncio.wait_for(fut, timeout_s)
        if isinstance(reply, ErrorReply):
            raise RequestFailed(reply)
        return then(reply) if then is not None else reply

    return asyncio.ensure_future(wait())


def _with_signal(request: Any) -> tuple[Any, CreatedSignal]:
    """``request`` with a new ``signal_id`` (unless it names one) and the :class:`CreatedSignal` it
    will create, as far as the client knows it before ingress answers."""
    if request.signal_id is None:
        request = request.model_copy(update={"signal_id": new_id("sig")})
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
    signal = CreatedSignal(id=request.signal_id, type=kind, contents=body["contents"],
                           attributes=dict(body.get("attributes") or {}), metadata=dict(body.get("metadata") or {}),
                           created_at=now_iso(), tag_name=tag, provider_options=body.get("provider_options"))
    return request, signal
