"""In-process doubles of the step's ports, to unit-test an agent, its tools and processors without
Kafka, PostgreSQL or a model server: :class:`MemorySink` (the chunk stream), :class:`MemoryStepStore`
(the step's state and results) and :class:`ScriptedModel` (the model, answering from a script).

    loop = StepLoop(default_model="openai/test", model_api_base=None, model_timeout_s=5,
                    model=ScriptedModel([text_delta("hi")]))
    outcome = await loop.run(step_run(), agent, StepInputs(attempt=1, seq_base=0, restarted=False,
                             signals=[user_signal("hello")]), MemorySink("run-1", 0), MemoryStepStore())

docs/testing.md has the whole example.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, cast

from threadline.errors import StaleWriterError
from threadline.events.chunk_types import Emitted, ToolCallPayload, Usage
from threadline.ids import new_id
from threadline.runtime.model.model_outcome import ModelOutcome
from threadline.runtime.step.ports import RunState, Signal, StepRecord, StepRun

__all__ = ["MemorySink", "MemoryStepStore", "ScriptedModel", "step_run", "text_delta", "tool_call", "user_signal"]

Script = list[dict[str, Any]] | BaseException
"""One scripted model response: its chunks ``{type, payload}``, or the error the call raises."""


class MemorySink:
    """A :class:`~threadline.runtime.step.ports.ChunkSink` that keeps the chunks it is given,
    stamped as the Kafka writer stamps them (``runId``, ``step``, ``attempt``, ``seq``).

    Args:
        run_id: the run.
        step: the step (0-based).
        attempt: the attempt number.
        seq: the first chunk's ``seq``.
        hold_finish: hold the ``finish`` chunk back (:attr:`held`), as the worker does until the
            step is stored.
    """

    def __init__(self, run_id: str, step: int, attempt: int = 1, seq: int = 0, *, hold_finish: bool = False) -> None:
        self.run_id, self.step, self.attempt, self.seq = run_id, step, attempt, seq
        self.finished = False
        self.held: dict[str, Any] | None = None
        self.hold_finish = hold_finish
        self.chunks: list[dict[str, Any]] = []
        """Every chunk emitted (a held ``finish`` included), in order."""
        self.flushed = 0
        """How many times :meth:`flush` was called."""

    async def emit(self, chunk: Emitted) -> dict[str, Any]:
        """Stamp ``chunk`` (a copy) and keep it; returns the stamped copy."""
        chunk = {**chunk, "runId": self.run_id, "step": self.step, "attempt": self.attempt, "seq": self.seq}
        self.seq += 1
        self.chunks.append(chunk)
        if chunk["type"] == "finish":
            if self.hold_finish:
                self.held = chunk
            else:
                self.finished = True
        return chunk

    async def flush(self) -> None:
        """Nothing to wait for; counted in :attr:`flushed`."""
        self.flushed += 1

    def drop_held(self) -> None:
        """Forget the held ``finish`` (its ``seq`` goes to the next chunk); later ones are kept."""
        if self.held is not None:
            self.seq = self.held["seq"]
            self.chunks.remove(self.held)
            self.held = None
        self.hold_finish = False

    def finish_stored(self) -> None:
        """The held ``finish`` was stored with the step: nothing is held, the stream is finished."""
        self.held = None
        self.finished = True

    def types(self) -> list[str]:
        """The kinds of the chunks kept, in order (``["start", "step-start", "text-delta", …]``)."""
        return [c["type"] for c in self.chunks]


class MemoryStepStore:
    """A :class:`~threadline.runtime.step.ports.StepStore` that records what the step loop saves.

    Args:
        pending: ids of signals pending for the run (:meth:`more_pending` reports those not
            consumed).
        owner: ``False``: another worker took the step over; every write then raises
            :class:`~threadline.errors.StaleWriterError` and :meth:`still_owner` answers ``False``.
    """

    def __init__(self, pending: Sequence[str] = (), *, owner: bool = True) -> None:
        self.saved: list[StepRecord] = []
        """Each :meth:`save`'s record, in order."""
        self.outputs: list[dict[str, Any]] = []
        """Each recorded model output ``{chunks, usage, finish_reason}``, in order."""
        self.tools: dict[str, tuple[Any, str | None]] = {}
        """The tool results ``(result, error)`` by call id (seed it to replay a crashed step)."""
        self.restarts: list[tuple[int, int]] = []
        """``(attempt, retry_count)`` of each processor retry."""
        self.pending = list(pending)
        self.owner = owner
        self.asked: list[str] = []
        """The reads and checks the loop made (``tool_results``, ``still_owner``, ``more_pending``), in order."""
        self.held: dict[str, tuple[str, str | None]] = {}
        """The calls held for approval, ``(status, reason)`` by call id (set a status to answer one)."""

    async def begin(self, run_id: str, *, step: int, epoch: int, takeover_from: object = None) -> Any:
        """Not served: the step loop never claims (the worker does); build a :func:`step_run`."""
        raise NotImplementedError("MemoryStepStore does not claim steps: pass a StepRun to StepLoop.run")

    def _fence(self, run: StepRun) -> None:
        if not self.owner:
            raise StaleWriterError(run.run_id, run.epoch)

    async def save(self, record: StepRecord) -> None:
        """Keep ``record`` in :attr:`saved` (fenced)."""
        self._fence(record.run)
        self.saved.append(record)

    async def record_model_output(self, run: StepRun, attempt: int, output: dict[str, Any],
                                  call_ids: Sequence[str] = ()) -> dict[str, tuple[Any, str | None]]:
        """Keep ``output`` in :attr:`outputs` (fenced); returns the known results of ``call_ids``."""
        self._fence(run)
        self.outputs.append(output)
        return {k: v for k, v in self.tools.items() if k in call_ids}

    async def restart_attempt(self, run: StepRun, attempt: int, retry_count: int) -> None:
        """Record a processor retry in :attr:`restarts` (fenced)."""
        self._fence(run)
        self.restarts.append((attempt, retry_count))

    async def tool_results(self, run: StepRun, call_ids: list[str]) -> dict[str, tuple[Any, str | None]]:
        """The known results of ``call_ids``."""
        self.asked.append("tool_results")
        return {k: v for k, v in self.tools.items() if k in call_ids}

    async def save_tool_result(self, run: StepRun, call_id: str, tool_name: str, result: object,
                               error: str | None) -> None:
        """Keep the result in :attr:`tools`."""
        self.tools[call_id] = (result, error)

    async def hold_call(self, run: StepRun, call: ToolCallPayload) -> None:
        """Keep the call in :attr:`held` as ``pending`` (once)."""
        self.held.setdefault(call["toolCallId"], ("pending", None))

    async def approvals(self, run: StepRun, call_ids: list[str]) -> dict[str, tuple[str, str | None]]:
        """The answers in :attr:`held` among ``call_ids``."""
        return {k: v for k, v in self.held.items() if k in call_ids}

    async def still_owner(self, run: StepRun, attempt: int) -> bool:
        """:attr:`owner`."""
        self.asked.append("still_owner")
        return self.owner

    async def more_pending(self, run: StepRun, exclude: list[str]) -> bool:
        """Any of :attr:`pending` not in ``exclude``."""
        self.asked.append("more_pending")
        return any(p not in exclude for p in self.pending)


class ScriptedModel:
    """A model function (:class:`~threadline.runtime.step.ports.ModelFn`) answering each call
    with the next scripted response; records every call.

    A response is a list of chunks (``text-delta``, ``tool-call``, ``reasoning-delta``…; see
    :func:`text_delta` and :func:`tool_call`) or an exception the call raises. The finish reason
    is ``tool-calls`` when the response has tool calls, else ``stop``; usage is ``usage``.

    Raises:
        AssertionError: on a call beyond the script (from the call), and from
            :meth:`assert_all_used` when responses were left unused.
    """

    def __init__(self, *responses: Script, usage: Mapping[str, object] | None = None) -> None:
        self._script = list(responses)
        self.usage = usage if usage is not None else {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5}
        self.calls: list[dict[str, Any]] = []
        """The keyword arguments of each call (``model``, ``messages``, ``tools``…), in order."""

    @property
    def prompts(self) -> list[list[dict[str, Any]]]:
        """The ``messages`` of each call, in order."""
        return [c["messages"] for c in self.calls]

    @property
    def remaining(self) -> int:
        """Responses not used yet."""
        return len(self._script)

    def assert_all_used(self) -> None:
        """Fail when a scripted response was never asked for."""
        assert not self._script, f"ScriptedModel: {len(self._script)} scripted response(s) never used"

    def __call__(self, *, outcome: ModelOutcome, **call: object) -> AsyncIterator[dict[str, Any]]:
        self.calls.append(call)
        if not self._script:
            raise AssertionError(f"ScriptedModel: call {len(self.calls)} has no scripted response "
                                 f"({len(self.calls) - 1} scripted)")
        return self._play(self._script.pop(0), outcome)

    async def _play(self, response: Script, outcome: ModelOutcome) -> AsyncIterator[dict[str, Any]]:
        if isinstance(response, BaseException):
            raise response
        for chunk in response:
            if chunk["type"] == "text-delta":
                outcome.add_text(chunk["payload"]["text"])
            elif chunk["type"] == "tool-call":
                outcome.tool_calls.append(cast(ToolCallPayload, dict(chunk["payload"])))  # scripted payload
            yield dict(chunk)
        outcome.finish_reason = "tool-calls" if outcome.tool_calls else "stop"
        outcome.usage = cast(Usage, dict(self.usage))  # the double's usage, as given


def text_delta(text: str) -> dict[str, Any]:
    """A ``text-delta`` chunk."""
    return {"type": "text-delta", "payload": {"text": text}}


def tool_call(name: str, args: Mapping[str, object], call_id: str | None = None) -> dict[str, Any]:
    """A ``tool-call`` chunk (``call_id``: a new id when omitted)."""
    return {"type": "tool-call", "payload": {"toolCallId": call_id or new_id("call"), "toolName": name, "args": args}}


def user_signal(text: str, signal_id: str | None = None) -> Signal:
    """A user message as the step drains it (a ``user`` signal)."""
    sid = signal_id or new_id("sig")
    return Signal(sid, {"id": sid, "type": "user", "tagName": "user", "contents": text, "attributes": {},
                        "metadata": {}, "createdAt": "2026-01-01T00:00:00Z"})


def step_run(*, run_id: str = "run-1", step: int = 0, state: RunState | None = None,
             options: dict[str, Any] | None = None, agent_id: str = "agent", thread_id: str = "thread-1",
             resource_id: str = "user-1") -> StepRun:
    """A claimed run at ``step`` (epoch 1), as the worker would hand it to the step loop."""
    return StepRun(run_id=run_id, resource_id=resource_id, thread_id=thread_id, agent_id=agent_id, epoch=1,
                   step=step, next_seq=0, options=options or {}, state=state or RunState())


class _ChunkList:
    """A :class:`~threadline.client.run_output.ChunkSource` over a list of chunks."""

    def __init__(self, chunks: Sequence[Mapping[str, Any]]) -> None:
        self._chunks = chunks

    @property
    def stream(self) -> AsyncIterator[Any]:
        async def gen() -> AsyncIterator[Any]:
            for chunk in self._chunks:
                yield chunk
        return gen()

    async def unsubscribe(self) -> None:
        return None


def run_output(chunks: Sequence[Mapping[str, Any]], run_id: str = "r") -> Any:
    """A :class:`~threadline.client.run_output.RunOutput` of ``run_id`` reading ``chunks`` (the
    list, read when the output is; a test may change it between reads): a stream's result
    without a cluster."""
    from threadline.client.run_output import RunOutput

    async def open_sub(from_ms: int, after: dict[str, int]) -> _ChunkList:
        return _ChunkList(chunks)

    return RunOutput(run_id, open_sub, 0)
