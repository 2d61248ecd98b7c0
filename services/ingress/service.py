"""ingress: validates requests from the ingress topic, routes them (wake / deliver / persist /
discard / queue) atomically in Postgres, answers on the replies topic, commands the orchestrator."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson

from threadline._internal.faults import pause_point
from threadline.errors import InvalidEventError
from threadline.events import AbortRequest, ErrorReply, SendNotificationSignal, ToolApprovalRequest
from threadline.events.codec import validate
from threadline.events.ingress import INGRESS_ADAPTER
from threadline.flows.agents import publish_agents
from threadline.flows.inbox import receive
from threadline.flows.routing import RequestRejected, route, route_abort
from threadline.kafka.consumer import Record
from threadline.kafka.handling import raw_field
from threadline.logging import get_logger
from threadline.orchestration.routing import Inbound
from threadline.runtime.registry import load_agents
from threadline.service import Service
from threadline.text import clean_json, find_bad_text
from threadline.topics import thread_key

log = get_logger(__name__)


_ID_FIELDS = ("type", "event_id", "agent_id", "resource_id", "thread_id", "reply_to", "run_id")
"""Top-level fields that name things (ids, keys, topics): refused when they hold text PostgreSQL or
UTF-8 cannot hold; every other string of a request is cleaned instead (decision 18)."""
_NESTED_ID_FIELDS = {"state": ("id", "cacheKey", "cache_key"), "signal": ("type",)}
_NOTIFICATION_ID_FIELDS = ("source", "kind", "dedupeKey", "dedupe_key", "coalesceKey", "coalesce_key")


def parse_request(value: bytes | None) -> Any:
    """The JSON body of an ingress record, with U+0000 and lone surrogate halves replaced by
    U+FFFD in its content (message text and parts, signal contents and attributes, metadata,
    options). orjson refuses a lone surrogate escape; such a body is read with the standard parser.

    Raises:
        InvalidEventError: ``empty``; ``invalid_json`` (not JSON, or bytes that are not UTF-8);
            ``invalid_characters`` (an id or key holds U+0000 or a lone surrogate half).
    """
    if value is None:
        raise InvalidEventError("empty record value", code="empty")
    try:
        body = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        try:
            body = json.loads(value.decode("utf-8"))
        except ValueError:  # UnicodeDecodeError included: bytes that are not UTF-8 text
            raise InvalidEventError(f"not valid JSON: {exc}", code="invalid_json") from exc
    if not isinstance(body, dict):
        return body  # validate() refuses it
    bad = _bad_id(body)
    if bad is not None:
        raise InvalidEventError(f"{bad} must not contain U+0000 (NUL) or a lone surrogate half",
                                code="invalid_characters")
    return clean_json(body)


def _bad_id(body: Mapping[str, object]) -> str | None:
    """The first id/key field of ``body`` holding text PostgreSQL or UTF-8 cannot hold."""
    if any(find_bad_text(k) for k in body):
        return "a field name"
    for name in _ID_FIELDS:
        if find_bad_text(body.get(name)):
            return name
    for outer, names in _NESTED_ID_FIELDS.items():
        inner = body.get(outer)
        if isinstance(inner, dict):
            for name in names:
                if find_bad_text(inner.get(name)):
                    return f"{outer}.{name}"
    notifications = body.get("notifications")
    for i, item in enumerate(notifications if isinstance(notifications, list) else ()):
        if isinstance(item, dict):
            for name in _NOTIFICATION_ID_FIELDS:
                if find_bad_text(item.get(name)):
                    return f"notifications.{i}.{name}"
    return None


class Ingress(Service):
    name = "ingress"

    async def setup(self) -> None:
        self.agents = load_agents(self.settings.agents_module)
        async with self.db.connection() as conn:  # what clients read of the agents (client.agent(id).details())
            await publish_agents(conn, self.agents.values())

    def topics_in(self) -> list[str]:
        return [self.settings.ingress_topic or self.topics.ingress]

    async def handle(self, record: Record) -> None:
        req = validate(parse_request(record.value), INGRESS_ADAPTER)
        if not 0 < len(req.event_id) <= 256:
            # an empty id would make every such request a "duplicate" of the first (dedupe by id)
            raise InvalidEventError("event_id must have 1 to 256 characters", code="invalid_event_id")
        expected = thread_key(req.resource_id, req.thread_id)
        if record.key is None or record.key.decode(errors="replace") != expected:
            # per-thread order rests on the key: a wrongly keyed request could overtake its thread
            raise InvalidEventError(f"record key must be the thread key {expected!r}", code="wrong_key")
        if req.reply_to is not None and not await self.admin.exists(req.reply_to):
            # a reply for a missing topic could never be acknowledged (and would block the outbox)
            raise InvalidEventError(f"reply_to topic {req.reply_to!r} does not exist", code="unknown_reply_topic")
        if isinstance(req, SendNotificationSignal):
            await self._notify(req)
            return
        async with self.db.connection() as conn:
            if isinstance(req, AbortRequest | ToolApprovalRequest):
                routed = await route_abort(conn, req, topics=self.topics)
            else:
                routed = await route(conn, req, topics=self.topics, lease_ttl_s=self.settings.lease_ttl_s,
                                     agent_known=req.agent_id in self.agents, starts=self.settings.ingress_starts,
                                     check=self._check_run)
        await pause_point("ingress_after_commit")  # fault injection: committed, nothing published yet
        if routed.chunk_topic is not None and not self.topics.shared_layout:  # the shared one was made at start
            await self.admin.ensure_chunk_topic(routed.chunk_topic, retention_ms=self.settings.chunk_retention_ms,
                                                thread=(req.resource_id, req.thread_id))
        await self.outbox.flush(routed.outbox_ids)
        if routed.reply is not None:
            log.info("routed", request_id=req.event_id, type=req.type, thread_id=req.thread_id,
                     reply=getattr(routed.reply, "type", None), action=getattr(routed.reply, "action", None),
                     run_id=getattr(routed.reply, "run_id", None))

    def _check_run(self, req: Inbound) -> None:
        """The agent's ``request_context_schema`` over the request context of a run it starts.

        Raises:
            ConfigurationError: the context does not match the schema.
        """
        agent = self.agents.get(req.agent_id)
        if agent is not None:
            agent.check_request_context(req.run_options.get("request_context"))

    async def _notify(self, req: SendNotificationSignal) -> None:
        agent = self.agents.get(req.agent_id)
        reply_to = req.reply_to or self.topics.replies
        if agent is not None and not self.topics.shared_layout:  # no topic for a request rejected (unknown agent) anyway
            await self.admin.ensure_chunk_topic(self.topics.chunks(req.resource_id, req.thread_id),
                                                retention_ms=self.settings.chunk_retention_ms,
                                                thread=(req.resource_id, req.thread_id))
        try:
            async with self.db.connection() as conn:
                ids, _ = await receive(conn, req, policy=agent.delivery_policy if agent else {}, topics=self.topics,
                                       lease_ttl_s=self.settings.lease_ttl_s,
                                       digest_window_s=self.settings.digest_window_s, agent_known=agent is not None)
        except RequestRejected as exc:
            await self.producer.publish(reply_to, ErrorReply(request_id=req.event_id, code=exc.code,
                                                             message=exc.message), key=req.event_id)
            return
        await self.outbox.flush(ids)

    async def on_invalid(self, record: Record, exc: InvalidEventError) -> None:
        request_id = raw_field(record, "event_id")
        if not isinstance(request_id, str) or not request_id:
            return  # nothing to correlate a reply with; the dead letter records it
        reply_to = raw_field(record, "reply_to")
        if not (isinstance(reply_to, str) and reply_to and len(reply_to) <= 249
                and all(c.isascii() and (c.isalnum() or c in "._-") for c in reply_to)) or not await self.admin.exists(reply_to):
            reply_to = self.topics.replies
        reply = ErrorReply(request_id=request_id[:256], code=exc.code, message=str(exc)[:2000])
        await self.producer.publish(reply_to, reply, key=request_id[:256])
