"""What a send result carries (the return shapes of Mastra's ``sendMessage``): the created signal, and on a
``wake`` the woken run's stream (``accepted.output``).

    result = await support.send_message("hi", {"resourceId": "u-1", "threadId": "t-1"})
    result.signal.id                        # known at once (the client chose it)
    accepted = await result.accepted
    if accepted.action == "wake":
        await accepted.output.consume_stream()   # raises RunFailed when the run ended in an error
        print(await accepted.output.text())      # what streamed (also of a failed run: see .error())
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from threadline.errors import ThreadlineError
from threadline.events.approval_chunks import TOOL_CALL_APPROVAL
from threadline.events.chunk_types import ChunkBody, ChunkKind, known
from threadline.events.json_types import JSONObject


class ChunkSource(Protocol):
    """What a run's stream reads: a started thread subscription (Kafka's or the gateway's SSE one)."""

    @property
    def stream(self) -> AsyncIterator[ChunkBody]: ...

    async def unsubscribe(self) -> None: ...


@dataclass
class CreatedSignal:
    """The signal a send created (Mastra's ``CreatedAgentSignal``).

    Filled from the request when it is sent (``created_at``: the client's clock), then updated
    with the stored signal when ``accepted`` resolves (ingress's ``created_at``, and the
    ``if_active`` / ``if_idle`` attributes merged in).

    Attributes:
        id: ``sig_…``; the id of the stored signal and of its transcript message.
        type: ``user``, ``state``, ``reactive`` or ``notification``.
        contents: a string or text/file parts, as sent.
        attributes, metadata: as sent (after ``accepted``: as stored).
        created_at: ISO 8601 UTC (``createdAt``).
        tag_name: the XML tag the model sees (``None`` until ``accepted`` when not given).
    """

    id: str
    type: str
    contents: str | list[JSONObject]
    attributes: JSONObject = field(default_factory=dict)
    metadata: JSONObject = field(default_factory=dict)
    created_at: str = ""
    tag_name: str | None = None
    provider_options: JSONObject | None = None
    accepted_at: str | None = None
    """ISO 8601 UTC: when ingress accepted it (``acceptedAt``; ``None`` until ``accepted``)."""

    def update(self, stored: dict[str, Any]) -> None:
        """Take the stored signal's fields (an ``accepted`` reply's ``signal``, without contents)."""
        self.type = stored.get("type", self.type)
        self.tag_name = stored.get("tagName", self.tag_name)
        self.attributes = dict(stored.get("attributes") or {})
        self.metadata = dict(stored.get("metadata") or {})
        self.created_at = stored.get("createdAt", self.created_at)
        self.provider_options = stored.get("providerOptions", self.provider_options)
        self.accepted_at = stored.get("acceptedAt", self.accepted_at)

    def to_dict(self) -> dict[str, object]:
        """Mastra's camelCase shape ``{id, type, tagName, contents, attributes, metadata, createdAt,
        acceptedAt?, providerOptions?}``."""
        out: dict[str, object] = {"id": self.id, "type": self.type, "tagName": self.tag_name, "contents": self.contents,
               "attributes": self.attributes, "metadata": self.metadata, "createdAt": self.created_at}
        if self.provider_options:
            out["providerOptions"] = self.provider_options
        if self.accepted_at:
            out["acceptedAt"] = self.accepted_at
        return out


class RunFailed(ThreadlineError):  # noqa: N818 - Mastra's wording: the run failed
    """The woken run ended in an error (``error`` chunk); ``error`` is its payload."""

    def __init__(self, run_id: str, error: Mapping[str, object]) -> None:
        super().__init__(f"run {run_id} failed: {error.get('message') or error}")
        self.run_id = run_id
        self.error = error


class RunOutput:
    """The stream of one run (``accepted.output`` on a ``wake``): the thread's chunks of that run
    only, from its first through its ``finish``, without duplicates or dead attempts — with its
    sub-agents' chunks, as the nested ``tool-output`` chunks the parent's thread carries (their
    own ``runId`` / ``seq``, decision 78).

    The subscription is opened lazily, at the first read, from the chunk topic's first record
    written after the request was sent (less ``margin_ms`` of clock skew); chunks of other runs
    are skipped. Reading it again replays the chunks read so far, then goes on where it stopped;
    one reader at a time (a second waits for the first).

    A run whose step holds a tool call for approval ends its stream too, as Mastra's does: after
    that step's ``step-finish`` (its ``tool-call-approval`` chunk read before it); the run goes on
    once the call is answered, and the answer's own output reads on from there (decision 227).

    Args:
        run_id: the woken run.
        open_subscription: ``(from_time_ms, after) -> ChunkSource`` started at that time,
            skipping the chunks ``after`` (``{run_id: seq}``) names as seen.
        sent_at_ms: when the request was published (ms since the epoch, the client's clock).
        after_seq: the run's chunks up to this ``seq`` are not its output (an approval's output
            starts after what the run streamed before it).
    """

    def __init__(self, run_id: str,
                 open_subscription: Callable[[int, dict[str, int]], Awaitable[ChunkSource]],
                 sent_at_ms: int, *, margin_ms: int = 60_000, after_seq: int | None = None) -> None:
        self.run_id = run_id
        self._open = open_subscription
        self._from_ms = max(0, sent_at_ms - margin_ms)
        self._chunks: list[ChunkBody] = []
        self._done = False
        self._lock = asyncio.Lock()
        self._after = {run_id: after_seq} if after_seq is not None else {}
        self._held_step: object = None  # the step that held a call for approval, when one did

    @property
    def stream(self) -> AsyncIterator[ChunkBody]:
        """Chunk dicts of the run, ending after its ``finish``."""
        return self._iterate()

    @property
    def full_stream(self) -> AsyncIterator[ChunkBody]:
        """Mastra's ``fullStream``: the same as :attr:`stream`."""
        return self._iterate()

    @property
    def text_stream(self) -> AsyncIterator[str]:
        """Mastra's ``textStream``: the run's text deltas."""
        return self._texts()

    async def _texts(self) -> AsyncIterator[str]:
        async for chunk in self._iterate():
            k = known(chunk)
            if k is not None and k["type"] == ChunkKind.TEXT_DELTA:
                yield (k.get("payload") or {}).get("text", "")

    async def _iterate(self) -> AsyncIterator[ChunkBody]:
        async with self._lock:
            for chunk in list(self._chunks):
                yield chunk
            if self._done:
                return
            seen: dict[str, int] = dict(self._after)  # the run's own chunks and its sub-agents' nested ones, by runId
            for c in self._chunks:
                seen[c.get("runId", "")] = c.get("seq", -1)
            sub = await self._open(self._from_ms, seen)
            try:
                async for chunk in sub.stream:
                    if chunk.get("runId") != self.run_id and not _nested_in(chunk, self.run_id):
                        continue
                    self._chunks.append(chunk)
                    yield chunk
                    if chunk["type"] == TOOL_CALL_APPROVAL and chunk.get("runId") == self.run_id:
                        self._held_step = chunk.get("step")
                    if chunk["type"] == ChunkKind.FINISH or (
                            chunk["type"] == ChunkKind.STEP_FINISH and self._held_step is not None
                            and chunk.get("step") == self._held_step and chunk.get("runId") == self.run_id):
                        self._done = True
                        return
            finally:
                await sub.unsubscribe()

    async def consume_stream(self, *, timeout_s: float | None = None) -> list[ChunkBody]:
        """Read the run to its ``finish`` (Mastra's ``consumeStream()``); returns its chunks.

        Raises:
            RunFailed: the run ended in an error.
            TimeoutError: no ``finish`` within ``timeout_s``.
        """
        async def drain() -> None:
            async for _ in self.stream:
                pass

        await asyncio.wait_for(drain(), timeout_s)
        kept = self._kept()
        for c in kept:
            k = known(c)
            if k is not None and k["type"] == ChunkKind.ERROR:
                raise RunFailed(self.run_id, k.get("payload") or {})
        return kept

    def _kept(self) -> list[ChunkBody]:
        """The chunks read, without those of attempts an ``attempt-discarded`` declared dead."""
        dead: dict[tuple[str | None, int | None], int] = {}
        for c in self._chunks:  # a nested chunk's attempts are its sub-agent run's (decision 78)
            inner = known(_inner(c))
            if inner is not None and inner["type"] == ChunkKind.ATTEMPT_DISCARDED:
                p = inner.get("payload") or {}
                key = (inner.get("runId"), p.get("step"))
                dead[key] = max(dead.get(key, -1), int(p.get("attempt", -1)))
        return [c for c in self._chunks if _inner(c)["type"] == ChunkKind.ATTEMPT_DISCARDED
                or not isinstance(c.get("attempt"), int)
                or c.get("attempt", 0) > dead.get((c.get("runId"), c.get("step")), -1)]

    async def _settled(self, timeout_s: float | None) -> list[ChunkBody]:
        """The run's kept chunks once it has finished, a failed run's too (what streamed before
        its error), as Mastra's stream result reads them. Raises ``TimeoutError`` as
        :meth:`consume_stream`."""
        try:
            return await self.consume_stream(timeout_s=timeout_s)
        except RunFailed:
            return self._kept()

    async def text(self, *, timeout_s: float | None = None) -> str:
        """The run's text (its ``text-delta`` chunks), once it has finished — also when the run
        failed (what streamed before the error; :meth:`error` tells the error), as Mastra's stream
        ``result.text``: the answer as ``process_output_result`` left it (the ``finish`` chunk's
        ``text`` when it changed it), ``""`` when it rejected the finished answer.

        Raises:
            TimeoutError: as :meth:`consume_stream`.
        """
        chunks = await self._settled(timeout_s)
        if _answer_rejected(chunks):
            return ""
        finish = next((k for k in map(known, reversed(chunks)) if k is not None and k["type"] == ChunkKind.FINISH), None)
        edited = (finish.get("payload") or {}).get("text") if finish is not None else None
        if isinstance(edited, str):
            return edited
        return "".join((k.get("payload") or {}).get("text", "") for k in map(known, chunks)
                       if k is not None and k["type"] == ChunkKind.TEXT_DELTA)

    async def finish_reason(self, *, timeout_s: float | None = None) -> str | None:
        """The finish chunk's reason (``stop``, ``tool-calls``, ``abort``, …), once finished;
        ``suspended`` when the output ended where the run waits for approval. A run a processor
        ended reports it as Mastra's stream result does: ``tripwire`` when its last
        ``step-finish`` says ``tripwire`` (``process_output_step`` rejected the answer), else
        ``other`` (decision 123).

        Raises:
            TimeoutError: as :meth:`consume_stream`.
        """
        chunks = await self._settled(timeout_s)
        finish = next((k for k in map(known, reversed(chunks)) if k is not None and k["type"] == ChunkKind.FINISH), None)
        if finish is None:  # the output ended where the run waits for approval: Mastra's "suspended"
            return "suspended" if self._held_step is not None else None
        payload = finish.get("payload") or {}
        if not payload.get("tripwire"):
            return (payload.get("stepResult") or {}).get("reason")
        step = next((k for k in map(known, reversed(chunks)) if k is not None and k["type"] == ChunkKind.STEP_FINISH),
                    None)
        return "tripwire" if step is not None and ((step.get("payload") or {}).get("stepResult") or {}).get(
            "reason") == "tripwire" else "other"


    async def error(self, *, timeout_s: float | None = None) -> dict[str, Any] | None:
        """The error that ended the run (Mastra's stream ``result.error``: the ``error`` chunk's
        ``error``, ``{kind, message, statusCode?, retryable, …}``), once finished; ``None`` when
        the run did not fail.

        Raises:
            TimeoutError: as :meth:`consume_stream`.
        """
        try:
            await self.consume_stream(timeout_s=timeout_s)
        except RunFailed as failed:
            inner = failed.error.get("error")
            return dict(inner) if isinstance(inner, Mapping) else dict(failed.error)
        return None

    async def tripwire(self, *, timeout_s: float | None = None) -> dict[str, Any] | None:
        """The tripwire that ended the run (Mastra's ``result.tripwire``: ``{reason, retry,
        metadata, processorId}``, from the ``finish`` chunk), once finished; ``None`` when no
        processor aborted it.

        Raises:
            TimeoutError: as :meth:`consume_stream`.
        """
        chunks = await self._settled(timeout_s)
        for k in map(known, reversed(chunks)):
            if k is not None and k["type"] == ChunkKind.FINISH:
                tripwire = (k.get("payload") or {}).get("tripwire")
                return dict(tripwire) if isinstance(tripwire, Mapping) else None
        return None


def _answer_rejected(chunks: list[ChunkBody]) -> bool:
    """True when a ``tripwire`` came after the run's last step had finished for good (a
    ``step-finish`` not continued, not itself rejected): ``process_output_result`` aborted."""
    last_step: Mapping[str, Any] | None = None
    for k in map(known, chunks):
        if k is None:
            continue
        if k["type"] == ChunkKind.STEP_FINISH:
            last_step = (k.get("payload") or {}).get("stepResult") or {}
        elif k["type"] == ChunkKind.TRIPWIRE:
            return last_step is not None and not last_step.get("isContinued") and last_step.get("reason") != "tripwire"
    return False


def _inner(chunk: ChunkBody) -> ChunkBody:
    """The sub-agent chunk a nested ``tool-output`` carries (decision 78), else the chunk itself."""
    k = known(chunk)
    if k is not None and k["type"] == ChunkKind.TOOL_OUTPUT:
        inner = (k.get("payload") or {}).get("output")
        if isinstance(inner, dict) and inner.get("runId") == k.get("runId"):
            return inner
    return chunk


def _nested_in(chunk: ChunkBody, run_id: str) -> bool:
    """A sub-agent's chunk delivered to ``run_id``'s thread (Mastra: part of the parent's stream)."""
    k = known(chunk)
    return k is not None and k["type"] == ChunkKind.TOOL_OUTPUT and (k.get("payload") or {}).get("parentRunId") == run_id
