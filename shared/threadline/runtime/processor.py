"""The Processor contract (docs/processors.md): the base class, ``abort()`` tripwires, and the runner that
calls the nine methods at their fixed points with the per-processor ``state``.

Methods (Python name ← Mastra name): ``process_input`` ← processInput, ``process_input_step`` ←
processInputStep, ``process_llm_request`` ← processLLMRequest, ``process_llm_response`` ←
processLLMResponse, ``process_api_error`` ← processAPIError, ``process_output_stream`` ←
processOutputStream, ``process_output_step`` ← processOutputStep, ``process_tool_result`` ←
processToolResult, ``process_output_result`` ← processOutputResult. Each may be sync or async and
takes keyword arguments; a method receives only the arguments it names (or all with ``**kwargs``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from threadline._internal.attrdict import AttrDict, wrap
from threadline._internal.usercode import call_user, is_async
from threadline.errors import ConfigurationError
from threadline.logging import get_logger
from threadline.runtime.messages import MessageList, system_text
from threadline.runtime.processor_args import AbortSignal, tracing_context

log = get_logger(__name__)

INPUT_METHODS = ("process_input", "process_input_step", "process_llm_request", "process_llm_response")
OUTPUT_METHODS = ("process_output_stream", "process_output_step", "process_output_result",
                  "process_tool_result")
ERROR_METHODS = ("process_api_error",)
BOUNDARY_CHUNKS = frozenset({"text-start", "text-end", "reasoning-start", "reasoning-end"})
"""Content-free boundary markers: emitted as they are, never given to ``process_output_stream``."""
LIST_METHODS = {"input": INPUT_METHODS, "output": OUTPUT_METHODS, "error": ERROR_METHODS}
"""The methods a processor of each list (``input``, ``output``, ``error``) may implement."""


class TripWire(Exception):  # noqa: N818 - Mastra's name
    """Raised by ``abort()``: stops the run (or, with ``retry=True`` and budget, retries the step).

    Attributes: ``reason``, ``retry``, ``metadata``, ``processor_id``.
    """

    def __init__(self, reason: str, *, retry: bool = False, metadata: object = None,
                 processor_id: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry = retry
        self.metadata = metadata
        self.processor_id = processor_id

    def payload(self) -> dict[str, object]:
        """The tripwire chunk payload ``{reason, retry, metadata, processorId}``."""
        return {"reason": self.reason, "retry": self.retry, "metadata": self.metadata,
                "processorId": self.processor_id}


class Processor:
    """Base class for processors. Set ``id`` (required); implement any of the nine methods.

    Attributes:
        id: unique id (also the key of the processor's ``state``).
        name: display name (defaults to ``id``).
        description: for tracing.
        processor_index: position in the run's list; set on a per-run copy by the runtime.
        process_data_parts: when True, ``process_output_stream`` also receives ``data-*`` chunks.
        on_violation: optional ``(violation) -> None`` called on every abort of this processor.
    """

    id: str = ""
    description: str | None = None
    processor_index: int | None = None
    process_data_parts: bool = False
    on_violation: Callable[..., object] | None = None

    @property
    def name(self) -> str:
        """Display name; defaults to ``id``."""
        return self.__dict__.get("_name") or self.id

    @name.setter
    def name(self, value: str) -> None:
        self.__dict__["_name"] = value


class ProcessorLike(Protocol):
    """What the runner needs of a processor: a string ``id`` (any object with one and some of the
    nine methods is a processor; :class:`Processor` is the convenient base)."""

    id: str


def implements(processor: object, method: str) -> bool:
    return callable(getattr(processor, method, None))


_SIG_CACHE: dict[object, tuple[bool, frozenset[str]]] = {}


def _accepted(fn: Callable[..., object]) -> tuple[bool, frozenset[str]]:
    key = getattr(fn, "__func__", fn)
    hit = _SIG_CACHE.get(key)
    if hit is None:
        params = inspect.signature(fn).parameters.values()
        var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
        names = frozenset(p.name for p in params if p.kind in (inspect.Parameter.KEYWORD_ONLY,
                                                                inspect.Parameter.POSITIONAL_OR_KEYWORD))
        hit = _SIG_CACHE[key] = (var_kw, names)
    return hit


class _Plan(NamedTuple):
    fn: Callable[..., Any]
    is_async: bool
    var_kw: bool
    names: frozenset[str]


class _AbortRecord:
    """One processor call's ``abort`` (its bound :meth:`abort`) and the tripwire it raised."""

    __slots__ = ("default_reason", "processor_id", "tripwire")

    def __init__(self, processor_id: str, default_reason: str) -> None:
        self.processor_id = processor_id
        self.default_reason = default_reason
        self.tripwire: TripWire | None = None

    def abort(self, reason: str | None = None, options: Mapping[str, object] | None = None, *,
              retry: bool | None = None, metadata: object = None) -> None:
        opts = options or {}
        self.tripwire = TripWire(reason or self.default_reason.format(id=self.processor_id),
                                 retry=bool(retry if retry is not None else opts.get("retry", False)),
                                 metadata=metadata if metadata is not None else opts.get("metadata"),
                                 processor_id=self.processor_id)
        raise self.tripwire


class ProcessorRunner:
    """Calls processors for one run. Holds per-processor ``state`` (one dict per processor id,
    shared by all its methods, carried across steps in Postgres) and the retry count."""

    def __init__(self, *, input_processors: Sequence[ProcessorLike], output_processors: Sequence[ProcessorLike],
                 error_processors: Sequence[ProcessorLike], states: dict[str, dict[str, Any]],
                 request_context: dict[str, Any] | None = None, writer: object = None,
                 retry_count: int = 0) -> None:
        self.input = input_processors
        self.output = output_processors
        self.error = error_processors
        self.states = states
        self.request_context = request_context or {}
        self.writer = writer
        self.retry_count = retry_count
        self.abort_signal = AbortSignal()
        """Mastra's ``abortSignal``, given to every method (set when the run is aborted)."""
        self.stream_parts: dict[str, list[AttrDict]] = {}
        self._stream_chain = [p for p in output_processors if implements(p, "process_output_stream")]
        self._plans: dict[tuple[int, str], _Plan] = {}
        self._stream_hooks: list[tuple[ProcessorLike, str, _Plan, bool, list[AttrDict], AttrDict]] | None = None

    def state_of(self, processor: ProcessorLike) -> AttrDict:
        state = self.states.get(processor.id)
        if state is None:
            state = self.states[processor.id] = AttrDict()
        elif not isinstance(state, AttrDict):
            state = self.states[processor.id] = wrap(state)
        return state

    async def call(self, processor: ProcessorLike, method: str, default_reason: str, **kwargs: object) -> object:
        """Call ``processor.method`` with the arguments it accepts; enforce ``abort()``.

        The abort is recorded before it raises and checked after the call returns, so an
        ``except`` in the processor cannot swallow it (K1).

        Raises:
            TripWire: the processor aborted.
        """
        plan = self._plan(processor, method)
        record = _AbortRecord(processor.id, default_reason)
        kwargs.update(abort=record.abort, retry_count=self.retry_count, request_context=self.request_context,
                      state=self.state_of(processor), writer=self.writer, abort_signal=self.abort_signal,
                      tracing_context=tracing_context())
        return await self._call(processor, plan, record, kwargs)

    def _plan(self, processor: ProcessorLike, method: str) -> _Plan:
        """How ``processor.method`` is called (bound method, coroutine function?, keywords it
        accepts), looked up once per runner (one step), not per chunk and processor."""
        key = (id(processor), method)
        plan = self._plans.get(key)
        if plan is None:
            fn = getattr(processor, method)
            var_kw, names = _accepted(fn)
            plan = self._plans[key] = _Plan(fn, is_async(fn), var_kw, names)  # fn holds processor: id stays its
        return plan

    async def _call(self, processor: ProcessorLike, plan: _Plan, record: _AbortRecord, kwargs: dict[str, object]) -> object:
        """Call ``plan.fn`` with the ``kwargs`` it accepts; ``record`` holds its ``abort``'s tripwire."""
        args = kwargs if plan.var_kw else {k: v for k, v in kwargs.items() if k in plan.names}
        try:  # a plain method runs off the event loop (call_user)
            result = await (plan.fn(**args) if plan.is_async else call_user(plan.fn, **args))
        except TripWire as tw:
            tw.processor_id = tw.processor_id or processor.id
            await self._violation(processor, tw)
            raise
        except Exception:
            if record.tripwire is not None:  # user code turned the abort into another error
                await self._violation(processor, record.tripwire)
                raise record.tripwire from None
            raise
        if record.tripwire is not None:  # the abort was caught and swallowed inside the method
            await self._violation(processor, record.tripwire)
            raise record.tripwire
        return result

    async def _violation(self, processor: ProcessorLike, tw: TripWire) -> None:
        handler = getattr(processor, "on_violation", None)
        if not callable(handler):
            return
        try:
            await call_user(handler, wrap({"processorId": tw.processor_id, "message": tw.reason,
                                           "detail": tw.metadata}))
        except Exception:
            log.warning("on_violation raised; ignored", processor_id=processor.id, exc_info=True)

    # --- message-returning phases --------------------------------------------------------------
    def apply_messages(self, ml: MessageList, result: object, *, before_ids: list[str],
                       default_source: str, split_system: bool = True) -> None:
        """Apply a processor's return value to the list (Mastra's processor merge rule: returned messages persist).

        Raises:
            ConfigurationError: a different ``MessageList`` instance was returned.
        """
        if result is None or result is ml:
            return
        messages, system = _returned(ml, result)
        if system is not None:
            ml.replace_all_system_messages(list(system))
        if messages is None:
            return
        returned_ids = {m.get("id") for m in messages if isinstance(m, dict)}
        ml.remove_by_ids([i for i in before_ids if i not in returned_ids])
        for m in messages:
            if split_system and isinstance(m, dict) and m.get("role") == "system":
                ml.add_system(system_text(m))
                continue
            source = ml.source_of(str(m["id"])) if isinstance(m, dict) and m.get("id") else None
            ml.add(m, source or default_source)  # type: ignore[arg-type]  # source_of returns a Source name or None

    async def process_input(self, ml: MessageList) -> None:
        """``processInput``: once, before the loop, over the chat messages (no system ones)."""
        for p in self.input:
            if not implements(p, "process_input"):
                continue
            messages = ml.get.all.db()
            before = [m["id"] for m in messages]
            result = await self.call(p, "process_input", "Tripwire triggered by {id}",
                                     messages=messages, message_list=ml,
                                     system_messages=ml.get_system_messages())
            self.apply_messages(ml, result, before_ids=before, default_source="input")

    async def process_input_step(self, ml: MessageList, step_input: dict[str, Any], *,
                                 step_number: int, steps: Sequence[Mapping[str, object]]) -> dict[str, Any]:
        """``processInputStep``: every step, chained; returns the folded step overrides."""
        for p in self.input:
            if not implements(p, "process_input_step"):
                continue
            messages = ml.get.all.db()
            before = [m["id"] for m in messages]
            result = await self.call(
                p, "process_input_step", "Tripwire triggered by {id}", messages=messages,
                message_list=ml, step_number=step_number, steps=steps,
                system_messages=ml.get_system_messages(), model=step_input.get("model"),
                tool_choice=step_input.get("tool_choice"), active_tools=step_input.get("active_tools"),
                tools=step_input.get("tools"), provider_options=step_input.get("provider_options"),
                model_settings=step_input.get("model_settings"),
                structured_output=step_input.get("structured_output"))
            if result is None or result is ml:
                continue
            if isinstance(result, list | MessageList):
                self.apply_messages(ml, result, before_ids=before, default_source="input")
                continue
            if not isinstance(result, dict):
                raise ConfigurationError(f"process_input_step of {p.id} returned {type(result).__name__}")
            result = dict(result)
            if "messages" in result and result.get("message_list") is not None:
                raise ConfigurationError(f"process_input_step of {p.id} returned both messages and "
                                         "message_list")
            if result.get("message_list") is not None and result["message_list"] is not ml:
                raise ConfigurationError(f"process_input_step of {p.id} returned a different MessageList")
            result.pop("message_list", None)
            messages = result.pop("messages", None)
            system = result.pop("system_messages", result.pop("systemMessages", None))
            if messages is not None or system is not None:
                self.apply_messages(ml, {"messages": messages, "system_messages": system},
                                    before_ids=before, default_source="input")
            for key, value in result.items():
                step_input[_snake(key)] = value  # key present → override; None clears (docs/decisions.md §6)
        return step_input

    async def process_llm_request(self, prompt: list[dict[str, Any]], *, model: str, step_number: int,
                                  steps: Sequence[Mapping[str, object]]) -> tuple[list[dict[str, Any]], Any]:
        """``processLLMRequest``: returns ``(prompt, cached_response_or_None)``; first response wins."""
        response = None
        for p in self.input:
            if not implements(p, "process_llm_request"):
                continue
            result = await self.call(p, "process_llm_request", "Tripwire triggered by {id}",
                                     prompt=prompt, model=model, step_number=step_number, steps=steps)
            if isinstance(result, dict):
                if "prompt" in result:
                    prompt = result["prompt"]
                if result.get("response") and response is None:
                    response = result["response"]
        return prompt, response

    async def process_llm_response(self, chunks: Sequence[object], *, model: str, step_number: int,
                                   steps: Sequence[Mapping[str, object]], from_cache: bool,
                                   extra: Mapping[str, object] | None = None) -> None:
        """``processLLMResponse``: after the stream, with every chunk of the step; ``extra`` holds
        the call's ``warnings``, ``request`` and ``raw_response``."""
        for p in self.input:
            if implements(p, "process_llm_response"):
                await self.call(p, "process_llm_response", "Tripwire triggered by {id}", chunks=chunks,
                                model=model, step_number=step_number, steps=steps, from_cache=from_cache,
                                **(extra or {}))

    def _hooks(self) -> list[tuple[ProcessorLike, str, _Plan, bool, list[AttrDict], AttrDict]]:
        hooks = self._stream_hooks
        if hooks is None:  # once per step: id, plan, takes data-* parts?, parts seen, state
            hooks = self._stream_hooks = [(p, p.id, self._plan(p, "process_output_stream"),
                                           bool(getattr(p, "process_data_parts", False)),
                                           self.stream_parts.setdefault(p.id, []), self.state_of(p))
                                          for p in self._stream_chain]
        return hooks

    def record_part(self, part: AttrDict) -> None:
        """Add a part the processors are not called with (``step-start``, the text and reasoning
        boundaries) to each ``process_output_stream`` processor's ``stream_parts``, as Mastra's
        holds every part of the run."""
        for hook in self._hooks():
            hook[4].append(part)

    async def process_output_stream(self, part: AttrDict, ml: MessageList | None = None) -> AttrDict | None:
        """``processOutputStream`` for one chunk: returns the chunk to emit, or ``None`` to drop.

        ``data-*`` chunks reach only processors with ``process_data_parts``. A non-tripwire
        exception is logged and the chunk continues unchanged to the next processor.
        """
        kind = part["type"]
        if kind in BOUNDARY_CHUNKS:
            self.record_part(part)
            return part
        is_data = kind.startswith("data-")
        for p, pid, plan, data_parts, seen, state in self._hooks():
            if is_data and not data_parts:
                continue
            seen.append(part)
            record = _AbortRecord(pid, "Stream part blocked by {id}")
            args = {"part": part, "stream_parts": seen, "message_list": ml, "abort": record.abort,
                    "retry_count": self.retry_count, "request_context": self.request_context, "state": state,
                    "writer": self.writer, "abort_signal": self.abort_signal, "tracing_context": tracing_context()}
            if not plan.var_kw:
                args = {k: v for k, v in args.items() if k in plan.names}
            try:  # inlined :meth:`_call` (per chunk and processor); a plain method runs off the event loop
                out = await (plan.fn(**args) if plan.is_async else call_user(plan.fn, **args))
            except Exception as exc:  # a tripwire is raised below, any other error logged
                tw = exc if isinstance(exc, TripWire) else record.tripwire
                if tw is None:
                    log.warning("process_output_stream raised; chunk passed on unchanged",
                                processor_id=pid, exc_info=True)
                    continue
                tw.processor_id = tw.processor_id or pid
                await self._violation(p, tw)
                if tw is exc:
                    raise
                raise tw from None  # user code turned the abort into another error
            if record.tripwire is not None:  # the abort was caught and swallowed inside the method
                await self._violation(p, record.tripwire)
                raise record.tripwire
            if out is None:
                return None
            part = out if isinstance(out, AttrDict) else wrap(dict(out))
        return part

    async def process_output_step(self, ml: MessageList, *, step_number: int, steps: Sequence[Mapping[str, object]],
                                  finish_reason: str, tool_calls: Sequence[object] | None, text: str,
                                  usage: object, provider_metadata: object = None) -> None:
        """``processOutputStep``: after the model's step, before its tools run (``provider_metadata``:
        Mastra's ``providerMetadata`` of the step, ``{<provider>: {...}}``)."""
        for p in self.output:
            if not implements(p, "process_output_step"):
                continue
            messages = ml.get.all.db()
            before = [m["id"] for m in messages]
            result = await self.call(p, "process_output_step", "Tripwire triggered by {id}",
                                     messages=messages, message_list=ml, step_number=step_number,
                                     steps=steps, finish_reason=finish_reason, tool_calls=tool_calls,
                                     text=text, usage=usage, provider_metadata=provider_metadata,
                                     system_messages=ml.get_system_messages())
            if isinstance(result, list) and not result:
                continue  # a guardrail (Mastra's QualityGuardrail example) returns [] when the step passes: no change
            self.apply_messages(ml, result, before_ids=before, default_source="response")

    async def process_tool_result(self, ml: MessageList, *, step_number: int, steps: Sequence[Mapping[str, object]],
                                  tool_name: str, tool_call_id: str, args: object, result: object) -> None:
        """``processToolResult``: after a tool returned, before its result enters the list."""
        for p in self.output:
            if implements(p, "process_tool_result"):
                await self.call(p, "process_tool_result", "Tripwire triggered by {id}",
                                messages=ml.get.all.db(), message_list=ml, step_number=step_number,
                                steps=steps, tool_name=tool_name, tool_call_id=tool_call_id, args=args,
                                result=result, provider_executed=None,
                                system_messages=ml.get_system_messages())

    async def process_output_result(self, ml: MessageList, *, result: Mapping[str, object]) -> None:
        """``processOutputResult``: once at the end, over the response messages."""
        for p in self.output:
            if not implements(p, "process_output_result"):
                continue
            messages = ml.get.response.db()
            before = [m["id"] for m in messages]
            out = await self.call(p, "process_output_result", "Tripwire triggered by {id}",
                                  messages=messages, message_list=ml, result=wrap(dict(result)))
            self.apply_messages(ml, out, before_ids=before, default_source="response", split_system=False)

    async def process_api_error(self, ml: MessageList, *, error: object, step_number: int,
                                steps: Sequence[Mapping[str, object]]) -> dict[str, object] | None:
        """``processAPIError`` of the error processors.

        Returns:
            ``{"processorId", "metadata"}`` of the first processor that returned ``{retry: True}``
            (its optional ``metadata`` included), or ``None`` when none asked for a retry.
        """
        for p in self.error:
            if not implements(p, "process_api_error"):
                continue
            try:
                out = await self.call(p, "process_api_error", "Tripwire triggered by {id}", error=error,
                                      messages=ml.get.all.db(), message_list=ml,
                                      step_number=step_number, steps=steps)
            except TripWire:
                raise
            except Exception:
                log.warning("process_api_error raised; ignored", processor_id=p.id, exc_info=True)
                continue
            if isinstance(out, dict) and out.get("retry"):
                return {"processorId": p.id, "metadata": out.get("metadata")}
        return None


class PrepareStep(Processor):
    """The agent's ``prepare_step`` callback, run after the input processors as part of the
    ``process_input_step`` chain (docs/processors.md, "execution order in the agentic loop")."""

    id = "prepare-step"

    def __init__(self, fn: Callable[..., object]) -> None:
        self._fn = fn

    async def process_input_step(self, **kwargs: object) -> object:
        var_kw, names = _accepted(self._fn)
        return await call_user(self._fn, **(kwargs if var_kw else {k: v for k, v in kwargs.items() if k in names}))


def _snake(key: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in key)


def _returned(ml: MessageList, result: object) -> tuple[list[object] | None, list[object] | None]:
    """A processor's return value as ``(messages, system_messages)`` (``None``: unchanged).

    Raises:
        ConfigurationError: a different ``MessageList`` instance, or an unsupported value.
    """
    if isinstance(result, MessageList):
        raise ConfigurationError("a processor returned a different MessageList instance; "
                                 "mutate the one it was given")
    if isinstance(result, list):
        return result, None
    if not (isinstance(result, dict) and ("messages" in result or "system_messages" in result
                                          or "systemMessages" in result)):
        raise ConfigurationError(f"unsupported processor return value {type(result).__name__}")
    if result.get("message_list") is not None and result.get("message_list") is not ml:
        raise ConfigurationError("a processor returned a different MessageList instance")
    return result.get("messages"), result.get("system_messages", result.get("systemMessages"))
