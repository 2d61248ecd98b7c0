"""Internal events between ingress, the run-orchestrator and processor-workers (keyed by thread)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from threadline.events.base import Event


class _RunEvent(Event):
    run_id: str
    resource_id: str
    thread_id: str


class StartRun(_RunEvent):
    """Ingress → orchestrator: a run was created (lease taken) and must be scheduled (or, when
    ``scheduled``, only announced)."""

    type: Literal["start_run"] = "start_run"
    epoch: int
    """Fencing epoch of the thread lease the run holds."""
    handover: bool = False
    """The lease came straight from the previous run (the thread never went idle)."""
    scheduled: bool = False
    """Step 0's task was already published by the transaction that created the run (ingress,
    docs/decisions.md 34): the orchestrator only announces the start (``thread_active``,
    ``run_started``) unless that was done already."""


class AbortRun(Event):
    """Ingress → orchestrator: end the thread's active run (or ``run_id``) with ``abort``."""

    type: Literal["abort_run"] = "abort_run"
    resource_id: str
    thread_id: str
    run_id: str | None = None
    request_id: str | None = None
    reply_to: str | None = None


class ResolveToolCall(Event):
    """Ingress → orchestrator: a person's answer to a call waiting for approval (Mastra's
    ``approveToolCall`` / ``declineToolCall``); answered with a ``resolved`` reply."""

    type: Literal["resolve_tool_call"] = "resolve_tool_call"
    resource_id: str
    thread_id: str
    run_id: str
    tool_call_id: str
    approved: bool
    reason: str | None = None
    """A decline's reason (the model reads it; default Mastra's "Tool call was not approved by the user")."""
    request_id: str | None = None
    reply_to: str | None = None


class StepTask(_RunEvent):
    """Orchestrator → worker: execute step ``step`` (attempt ``attempt``) of the run."""

    type: Literal["step_task"] = "step_task"
    step: int
    attempt: int
    epoch: int


class StepResult(_RunEvent):
    """Worker → orchestrator: the step ended. ``outcome`` says what the orchestrator does next.

    ``continue``: schedule step + 1. ``finished`` / ``failed`` / ``tripwire`` / ``aborted``: the
    run is over (the worker already emitted ``finish``). ``suspended``: the step called
    sub-agents or tools waiting for approval; start the child runs, schedule step + 1 once they
    all ended and every approval was answered (decisions 77, 226).
    """

    type: Literal["step_result"] = "step_result"
    step: int
    attempt: int
    epoch: int
    outcome: Literal["continue", "finished", "failed", "tripwire", "aborted", "suspended"]
    finish_reason: str | None = None
    text: str | None = None
    usage: dict[str, Any] = Field(default_factory=dict)
    error: dict[str, Any] | None = None
    tripwire: dict[str, Any] | None = None


RunCommand = Annotated[StartRun | AbortRun | StepResult | ResolveToolCall, Field(discriminator="type")]
"""What the orchestrator consumes (run commands and step results)."""

InternalEvent = Annotated[StartRun | AbortRun | StepTask | StepResult | ResolveToolCall, Field(discriminator="type")]
INTERNAL_ADAPTER: TypeAdapter[InternalEvent] = TypeAdapter(InternalEvent)
