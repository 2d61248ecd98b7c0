"""The routing decision of a request on a thread (``send_message``, ``queue_message``,
``send_signal``, ``send_state_signal``, ``stream``, ``generate``): what happens to it given the
thread's state as read under its lease lock. Pure: the store reads, calls :func:`decide_route`
and writes what it answers.

- ``send_message``, ``send_signal``, ``send_state_signal``: on an active thread
  ``if_active.behavior`` — :class:`Deliver` (default), :class:`Persist`, :class:`Discard`; on an
  idle thread ``if_idle.behavior`` — :class:`Wake` (default), :class:`Persist`, :class:`Discard`.
- ``queue_message``: :class:`Queue` on an active thread (a run of its own after the active one),
  :class:`Wake` on an idle one (whatever ``if_idle`` says).
- ``stream``, ``generate``: :class:`Queue` on an active thread, :class:`Wake` on an idle one.
- anything for another agent than the active run's (and not naming that run): :class:`Queue`.

The branch's ``attributes`` (``if_active.attributes`` / ``if_idle.attributes``) are merged over the
signal's. A state signal whose lane value is unchanged is skipped before routing
(:func:`decide_state`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from threadline.events.ingress import (
    Generate,
    IfActive,
    IfIdle,
    QueueMessage,
    SendMessage,
    SendSignal,
    SendStateSignal,
    SignalInput,
    StateInput,
    Stream,
)
from threadline.events.json_types import JSONObject
from threadline.orchestration.options import normalize_options

RequestKind = Literal["send_message", "queue_message", "send_signal", "send_state_signal", "stream", "generate"]
RoutableRequest = SendMessage | QueueMessage | SendSignal | SendStateSignal | Stream | Generate
"""The ingress requests :func:`decide_route` answers."""
SIGNALLING: tuple[RequestKind, ...] = ("send_message", "send_signal", "send_state_signal")
"""Requests with ``if_active`` / ``if_idle`` behaviours (deliver into an active run)."""


@dataclass(frozen=True, slots=True)
class Branch:
    """One branch of a request's ``if_active`` / ``if_idle``."""

    behavior: str
    """``deliver`` / ``persist`` / ``discard`` (active), ``wake`` / ``persist`` / ``discard`` (idle)."""
    attributes: Mapping[str, object] = field(default_factory=dict)
    """Merged over the signal's attributes when this branch is taken."""


_DELIVER = Branch("deliver")
_WAKE = Branch("wake")


@dataclass(frozen=True, slots=True)
class Inbound:
    """A request to route, whatever carried it: an ingress request (:meth:`of`) or the
    notification inbox (:meth:`signal`)."""

    event_id: str
    """The idempotency key (the reply is keyed by it)."""
    kind: RequestKind
    """The request type, as stored in the signal's options (``kind``)."""
    agent_id: str
    """The agent the request is for."""
    resource_id: str
    """The thread's owner."""
    thread_id: str
    """The thread."""
    reply_to: str | None = None
    """Topic for the replies (``None``: the cluster's replies topic)."""
    run_id: str | None = None
    """A run the request targets by id (it is delivered there whatever that run's agent)."""
    if_active: Branch = _DELIVER
    """What to do while a run holds the thread (``send_*`` only)."""
    if_idle: Branch = _WAKE
    """What to do when the thread is idle."""
    run_options: Mapping[str, object] = field(default_factory=dict)
    """Options (normalised names) of the run a wake starts."""
    body: object = ""
    """What becomes the signal: a message input (string, parts, ``{contents, attributes, …}``)."""
    signal_type: str = "user"
    """The signal's type (``user``, ``state``, ``reactive``, ``notification``, or a legacy name)."""
    tag_name: str | None = None
    """The signal's XML tag (``None``: the type's default)."""
    thread: Mapping[str, object] | None = None
    """``{title, metadata}`` of the thread row (``stream`` / ``generate``)."""
    state: StateInput | None = None
    """The lane value of a ``send_state_signal``."""
    signal_id: str | None = None
    """The id the client chose for the signal (``None``: a new one)."""

    @property
    def targeted(self) -> bool:
        """The request has ``if_active`` / ``if_idle`` behaviours."""
        return self.kind in SIGNALLING

    @classmethod
    def of(cls, req: RoutableRequest) -> Inbound:
        """The routing view of an ingress request."""
        common: dict[str, Any] = {"event_id": req.event_id, "agent_id": req.agent_id,
                                  "resource_id": req.resource_id, "thread_id": req.thread_id,
                                  "reply_to": req.reply_to, "signal_id": req.signal_id}
        if isinstance(req, Stream):  # and Generate
            return cls(kind=req.type, run_options=normalize_options(req.options), body=req.message,
                       thread=req.thread, **common)
        if isinstance(req, QueueMessage):
            return cls(kind=req.type, if_idle=_idle(req.if_idle), body=req.message,
                       run_options=normalize_options(req.if_idle.stream_options), **common)
        targeted: dict[str, Any] = {"run_id": req.run_id, "if_active": _active(req.if_active),
                                    "if_idle": _idle(req.if_idle),
                                    "run_options": normalize_options(req.if_idle.stream_options), **common}
        if isinstance(req, SendSignal):
            return cls(kind=req.type, **_signal_fields(req.signal), **targeted)
        if isinstance(req, SendStateSignal):
            st = req.state
            return cls(kind=req.type, body={"contents": st.contents, "attributes": st.attributes,
                                            "metadata": st.metadata},
                       signal_type="state", tag_name=st.tag_name, state=st, **targeted)
        return cls(kind=req.type, body=req.message, **targeted)

    @classmethod
    def signal(cls, signal: SignalInput, *, event_id: str, agent_id: str, resource_id: str, thread_id: str,
               reply_to: str | None, if_idle: str, stream_options: Mapping[str, object]) -> Inbound:
        """A ``send_signal`` made by Threadline itself (the notification inbox): delivered into
        the active run, else ``if_idle`` (``wake`` or ``persist``) with ``stream_options``."""
        return cls(event_id=event_id, kind="send_signal", agent_id=agent_id, resource_id=resource_id,
                   thread_id=thread_id, reply_to=reply_to, if_idle=Branch(if_idle),
                   run_options=normalize_options(stream_options), **_signal_fields(signal))


def _active(branch: IfActive) -> Branch:
    return Branch(branch.behavior, branch.attributes)


def _idle(branch: IfIdle) -> Branch:
    return Branch(branch.behavior, branch.attributes)


def _signal_fields(sig: SignalInput) -> dict[str, Any]:
    return {"body": {"contents": sig.contents, "attributes": sig.attributes, "metadata": sig.metadata,
                     "provider_options": sig.provider_options},
            "signal_type": sig.type, "tag_name": sig.tag_name}


@dataclass(frozen=True, slots=True)
class ThreadState:
    """The thread as read under its lease lock."""

    active: bool
    """A run holds an unexpired lease."""
    run_id: str | None = None
    """The run holding the lease (when ``active``)."""
    run_agent_id: str | None = None
    """That run's agent (when ``active``)."""
    run_ended: bool = False
    """That run has ended (its last step is stored, its ``finish`` may be on the stream) and the
    orchestrator has not released the lease yet."""


@dataclass(frozen=True, slots=True)
class Wake:
    """Start a run with the signal as its first input (the thread is idle)."""

    attributes: Mapping[str, object] = field(default_factory=dict)
    """Merged over the signal's attributes."""


@dataclass(frozen=True, slots=True)
class Deliver:
    """Give the signal to the active run (taken at its next step boundary)."""

    run_id: str
    """The active run."""
    attributes: Mapping[str, object] = field(default_factory=dict)
    """Merged over the signal's attributes."""


@dataclass(frozen=True, slots=True)
class Queue:
    """A run of its own for the signal once the active run ends (never mixed into it)."""

    attributes: Mapping[str, object] = field(default_factory=dict)
    """Merged over the signal's attributes."""


@dataclass(frozen=True, slots=True)
class Persist:
    """Store the signal in the thread; no run sees it."""

    idle: bool
    """The thread is idle: subscribers see a run with no model call (``start``, echo, ``finish``)."""
    attributes: Mapping[str, object] = field(default_factory=dict)
    """Merged over the signal's attributes."""
    run_id: str | None = None
    """The thread's active run (``idle`` false): its own input is stored before the signal, so the
    thread keeps Mastra's order by creation time (decision 185)."""


@dataclass(frozen=True, slots=True)
class Discard:
    """Drop the signal (it is recorded as discarded)."""

    attributes: Mapping[str, object] = field(default_factory=dict)
    """Merged over the signal's attributes."""


Route = Wake | Deliver | Queue | Persist | Discard
"""What :func:`decide_route` answers."""


def decide_route(req: Inbound, thread: ThreadState) -> Route:
    """The routing table of the module docstring (and of ``docs/signals.md``), for ``req`` on
    ``thread``."""
    targeted = req.targeted
    if thread.active:
        # an explicit run_id targets that run whatever its agent; another agent's run is never
        # interrupted: the message waits for the thread
        same_agent = thread.run_agent_id == req.agent_id or req.run_id == thread.run_id
        behavior = req.if_active.behavior if targeted and same_agent else "queue"
        attributes = req.if_active.attributes if targeted else {}
    elif req.kind == "queue_message":  # queueMessage on an idle thread always starts a run
        behavior, attributes = "wake", req.if_idle.attributes
    elif targeted:
        behavior, attributes = req.if_idle.behavior, req.if_idle.attributes
    else:
        behavior, attributes = "wake", {}
    if behavior == "discard":
        return Discard(attributes)
    if behavior == "persist":
        return Persist(idle=not thread.active, attributes=attributes,
                       run_id=thread.run_id if thread.active else None)
    if behavior == "deliver" and thread.run_id is not None:
        if thread.run_ended:  # nothing would read a delivery: the message is the next run's turn
            return Queue(attributes)
        return Deliver(thread.run_id, attributes)
    if behavior == "queue":
        return Queue(attributes)
    return Wake(attributes)


@dataclass(frozen=True, slots=True)
class Lane:
    """A state lane's current value, as stored."""

    cache_key: str | None
    """The cache key of the lane's current value."""
    mode: str | None
    """``snapshot`` or ``delta``."""
    version: int
    """Bumped by one per accepted value."""


@dataclass(frozen=True, slots=True)
class Skip:
    """The state signal's value is the lane's current one: answered ``skipped``, nothing stored."""


@dataclass(frozen=True, slots=True)
class NextVersion:
    """The state signal is the lane's next value."""

    version: int
    """The lane's new version."""
    state: JSONObject
    """``metadata.state`` of the signal: ``{id, threadId, cacheKey, version, mode, value|delta}``."""


def decide_state(state: StateInput, *, thread_id: str, lane: Lane | None) -> Skip | NextVersion:
    """Skip an unchanged value (same ``cache_key`` and ``mode``), else the lane's next version."""
    if lane is not None and lane.cache_key == state.cache_key and lane.mode == state.mode:
        return Skip()
    version = (lane.version if lane else 0) + 1
    meta: JSONObject = {"id": state.id, "threadId": thread_id, "cacheKey": state.cache_key,
                            "version": version, "mode": state.mode}
    if state.mode == "snapshot" and state.value is not None:
        meta["value"] = state.value
    if state.mode == "delta" and state.delta is not None:
        meta["delta"] = state.delta
    return NextVersion(version, meta)
