"""Replies on the replies topic (or the request's ``reply_to``), keyed by request id."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, TypeAdapter, field_serializer, field_validator, model_validator

from threadline.events.base import Event


class _ReplyBase(Event):
    request_id: str
    """``event_id`` of the request this answers."""


class Accepted(_ReplyBase):
    """The routing decision (the ``accepted`` promise of Mastra's ``sendMessage``)."""

    type: Literal["accepted"] = "accepted"
    action: Literal["wake", "deliver", "persist", "discard"]
    run_id: str | None = None
    """The run that handles the message (``wake`` and ``deliver`` only)."""
    signal_id: str | None = None
    """Id of the stored signal / message."""
    signal: dict[str, Any] | None = None
    """The created signal as stored (Mastra's ``CreatedAgentSignal``) but its contents (the request has
    them): ``{id, type, tagName, attributes, metadata, createdAt, providerOptions?}``, the
    ``ifActive`` / ``ifIdle`` attributes merged in."""
    _output: Any = PrivateAttr(default=None)

    @property
    def output(self) -> Any:
        """On ``wake``, in a client: a :class:`threadline.client.RunOutput` on the woken run's
        stream (chunks of that run only); ``None`` otherwise."""
        return self._output


class Persisted(_ReplyBase):
    """The ``persisted`` confirmation: a ``persist`` message is durable in the thread."""

    type: Literal["persisted"] = "persisted"
    signal_id: str


class ErrorReply(_ReplyBase):
    """The request could not be routed; ``code`` is stable, ``message`` is for people."""

    type: Literal["error"] = "error"
    code: str
    message: str


class RunResult(_ReplyBase):
    """Result of a ``generate`` request (what Mastra's ``generate()`` returns)."""

    type: Literal["result"] = "result"
    run_id: str
    text: str = ""
    finish_reason: str
    usage: dict[str, Any] = Field(default_factory=dict)
    """Mastra's result usage: ``inputTokens``, ``outputTokens``, ``totalTokens``, and
    ``cachedInputTokens`` / ``reasoningTokens`` (``0`` when the provider reported none); with the
    last step's provider report, ``raw {inputTokens {total, noCache, cacheRead}, outputTokens
    {total, text, reasoning}, raw}`` from the last step's usage (as Mastra's result)."""
    steps: list[dict[str, Any]] = Field(default_factory=list)
    tripwire: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    object: Any = None
    """The validated structured output (``structuredOutput``): the last step's ``object``."""

    @field_validator("usage")
    @classmethod
    def _detail_counts(cls, usage: dict[str, Any]) -> dict[str, Any]:
        if usage and "inputTokens" in usage:  # as Mastra's result: the details are always there
            return {**usage, "cachedInputTokens": usage.get("cachedInputTokens") or 0,
                    "reasoningTokens": usage.get("reasoningTokens") or 0}
        return usage

    @model_validator(mode="after")
    def _from_the_last_step(self) -> RunResult:
        last = self.steps[-1] if self.steps and isinstance(self.steps[-1], dict) else {}
        if self.object is None:
            self.object = last.get("object")
        raw = (last.get("usage") or {}).get("raw") if isinstance(last.get("usage"), dict) else None
        if raw is not None and "inputTokens" in self.usage and "raw" not in self.usage:
            self.usage = {**self.usage, "raw": raw}  # the last step's report, as Mastra's result
        return self


class Aborted(_ReplyBase):
    """Answer to an ``abort`` request: whether a run was aborted, and which."""

    type: Literal["aborted"] = "aborted"
    aborted: bool
    run_id: str | None = None


class ToolCallResolved(_ReplyBase):
    """Answer to a ``tool_approval`` request. ``resolved``: this answer was recorded (the call's
    status moved from ``pending``); ``status``: the call's status now (``approved``,
    ``declined``, or ``unknown`` when the run waits on no such call); a repeated answer reports
    ``resolved: false`` and the status the first one set."""

    type: Literal["resolved"] = "resolved"
    resolved: bool
    status: str
    run_id: str | None = None
    tool_call_id: str | None = None


class Skipped(_ReplyBase):
    """A state signal whose cache key and mode are already the lane's current value: nothing sent
    (Mastra's ``{skipped: true, reason: "unchanged"}``)."""

    type: Literal["skipped"] = "skipped"
    skipped: bool = True
    reason: str = "unchanged"


class Notified(_ReplyBase):
    """Answer to ``send_notification_signal``: per notification, the stored ``record`` (id,
    status, …), the policy's ``decision``, and the signal that went out now, if any."""

    type: Literal["notified"] = "notified"
    results: list[dict[str, Any]]
    """In a client, a woken run's result also holds ``output`` (a ``RunOutput``): never serialised."""

    @field_serializer("results")
    def _without_outputs(self, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k != "output"} for r in results]


Reply = Annotated[Accepted | Persisted | ErrorReply | RunResult | Aborted | Skipped | Notified | ToolCallResolved,
                  Field(discriminator="type")]
REPLY_ADAPTER: TypeAdapter[Reply] = TypeAdapter(Reply)
