"""One set of rules for a streamed model answer, whichever path read it (docs/decisions.md §20).

:class:`StreamNormaliser` is fed the chunk dicts of an OpenAI-compatible stream (``{"choices":
[{"index", "delta", "finish_reason"}], "usage"}``) as :mod:`threadline.runtime.model.llm_stream` hands
them over — decoded from the provider's SSE bytes, converted from the openai SDK's objects or from
litellm's ``CustomStreamWrapper`` — and yields Mastra chunks (``{type, payload}``). The rules:

* **Tool calls** are keyed by ``index`` *and* ``id``: a fragment whose ``id`` is new starts a new
  call, even at an index already used (Gemini-style streams number every call 0); a fragment
  without an ``id`` continues the call last started at its index (a fragment without an index
  takes its position in its delta); a fragment repeating a known ``id`` continues that call. A
  call started without an ``id`` is named ``call_<n>`` (``n`` its position among the step's
  calls) and takes the first ``id`` fragment at its index as its own continuation.
* **Arguments** ``""``, ``null``, absent or the JSON ``null`` are ``{}``; arguments sent as an
  object are taken as is; text that is not JSON is kept as ``{"__raw": text}``.
* **Reasoning**: ``reasoning_content`` (or ``reasoning``) deltas; an Anthropic thinking block's
  signature (litellm's ``thinking_blocks``) rides on ``reasoning-end`` as
  ``providerMetadata.anthropic.signature``, so the block can go back to the provider.
* **Finish reason**: the provider's, mapped to Mastra's (``tool-calls`` whenever calls were
  streamed, unless the answer was cut by ``length``). A stream is complete only when it says so:
  a finish reason, or ``[DONE]`` (then the reason is inferred: ``tool-calls`` when calls were
  streamed, else ``stop``). A body that stops after data with neither is unfinished
  (:func:`unfinished`): its calls are never emitted.
* **Usage** is read from any chunk that carries it (a ``choices: []`` chunk, a chunk with an
  empty delta, the finish chunk); the last report wins. ``prompt_tokens_details.cached_tokens``
  (or Anthropic's ``cache_read_input_tokens``) is ``cachedInputTokens``,
  ``completion_tokens_details.reasoning_tokens`` is ``reasoningTokens``; every count is an
  integer (a numeric string is converted; anything else is dropped).
* **End of the stream**: clean with no event at all (an empty or non-SSE ``200`` body) is the
  error kind ``bad_response``; cut off (the connection dropped, the body incomplete) is
  ``stream_interrupted``; both are retryable (:func:`bad_response`, :func:`interrupted`).
"""

from __future__ import annotations

from typing import Any, TypedDict

from threadline.errors import ModelCallError
from threadline.events.chunk_types import ToolCallPayload
from threadline.events.json_types import JSONValue
from threadline.runtime.model.model_outcome import ModelOutcome, Usage
from threadline.text import PieceJoiner, clean_json, clean_text, loads_clean

FINISH = {"stop": "stop", "tool_calls": "tool-calls", "function_call": "tool-calls",
          "length": "length", "content_filter": "content-filter"}
"""Provider finish reasons and Mastra's names for them; any other is ``other``."""
TEXT_ID = "txt-0"
"""The ``id`` of a step's text part, as Mastra's OpenAI-compatible provider names it (one text part
per step); its ``text-end`` payload repeats ``type``, as Mastra's does."""
REASONING_ID = "reasoning-0"
"""The ``id`` of a step's reasoning part, as Mastra's OpenAI-compatible provider names it."""
USAGE_KEYS = ("inputTokens", "outputTokens", "totalTokens", "cachedInputTokens", "reasoningTokens")


def bad_response(detail: str = "the response has no stream events") -> ModelCallError:
    """The error of a ``200`` answer that is not a stream: an empty or non-SSE body (kind
    ``bad_response``, retryable)."""
    return ModelCallError(f"the model returned a 200 response that is not a stream: {detail}",
                          kind="bad_response", status_code=200, retryable=True)


def unfinished() -> ModelCallError:
    """The error of a body that ended after data without a finish reason or ``[DONE]``: an
    interrupted stream (kind ``stream_interrupted``, retryable), in Mastra's words."""
    return ModelCallError("Response stream ended without a finish reason.", kind="stream_interrupted",
                          retryable=True)


def interrupted(cause: BaseException) -> ModelCallError:
    """The error of a stream cut off before its end (kind ``stream_interrupted``, retryable)."""
    err = ModelCallError(f"the model stream was cut off before its end: {type(cause).__name__}: {cause}"[:500],
                         kind="stream_interrupted", retryable=True)
    err.__cause__ = cause
    return err


def _get(obj: object, key: str) -> object:
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def count(value: object) -> int | None:
    """A token count as an integer: ints as they are, integral floats and numeric strings
    converted; ``None`` for anything else (booleans included)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def usage(raw: object) -> Usage:
    """Mastra's usage from a provider usage report (a dict or an object): ``inputTokens``,
    ``outputTokens``, ``totalTokens`` (their sum when not reported), and ``cachedInputTokens`` /
    ``reasoningTokens`` when reported and non-zero. All integers."""
    inp, out = count(_get(raw, "prompt_tokens")), count(_get(raw, "completion_tokens"))
    if inp is None:
        inp = count(_get(raw, "input_tokens"))
    if out is None:
        out = count(_get(raw, "output_tokens"))
    total = count(_get(raw, "total_tokens"))
    result: Usage = {"inputTokens": inp or 0, "outputTokens": out or 0,
              "totalTokens": total if total is not None else (inp or 0) + (out or 0)}
    cached = count(_get(_get(raw, "prompt_tokens_details"), "cached_tokens"))
    if cached is None:
        cached = count(_get(raw, "cache_read_input_tokens"))
    reasoning = count(_get(_get(raw, "completion_tokens_details"), "reasoning_tokens"))
    if cached:
        result["cachedInputTokens"] = cached
    if reasoning:
        result["reasoningTokens"] = reasoning
    return result


def as_json(raw: Any) -> dict[str, Any] | None:
    """A provider usage report as JSON: a dict as it is, a pydantic object dumped; else ``None``."""
    if isinstance(raw, dict):
        return clean_json(raw)
    dump = getattr(raw, "model_dump", None)
    if callable(dump):
        value = dump(exclude_none=True)
        return clean_json(value) if isinstance(value, dict) else None
    return None


def parse_args(text: str, obj: object = None) -> JSONValue:
    """A call's arguments: ``obj`` when they came as an object, else ``text`` parsed; empty,
    whitespace or ``null`` is ``{}``; text that is not JSON is ``{"__raw": text}``."""
    if isinstance(obj, dict):
        return clean_json(obj)
    if not text.strip():
        return {}
    try:
        parsed = loads_clean(text)  # an escaped lone surrogate half is read and replaced (decision 18)
    except ValueError:
        return {"__raw": text}
    return {} if parsed is None else parsed


class _Call(TypedDict):
    """A tool call being streamed: its fragments gathered until the stream ends."""

    toolCallId: str
    toolName: str
    argsText: list[str]
    """The argument text fragments, joined at the end."""
    argsObject: JSONValue
    """The arguments when a fragment gave them as an object (``None``: as text)."""
    provided: bool
    """The stream named the call's id (else one was made up)."""
    started: bool
    """Its ``tool-call-input-streaming-start`` was emitted."""
    joiner: PieceJoiner
    """Joins its argument fragments before they are cleaned (§181)."""


class StreamNormaliser:
    """Turns one stream's chunk dicts into Mastra chunks and fills ``outcome`` (a
    :class:`threadline.runtime.model.llm.ModelOutcome`).

    Call :meth:`feed` per chunk and :meth:`end` once the stream ended cleanly; both return the
    Mastra chunks to yield. ``events`` counts the chunks fed.
    """

    def __init__(self, outcome: ModelOutcome, *, take_usage: bool = True) -> None:
        self.outcome = outcome
        self.take_usage = take_usage
        """False: usage on the chunks is ignored (litellm invented it; the provider sent none)."""
        self.events = 0
        self._text_open = self._reasoning_open = False
        self._signature: str | None = None
        self._text, self._reasoning = PieceJoiner(), PieceJoiner()  # text is joined before it is cleaned (§181)
        self._calls: list[_Call] = []
        self._at_index: dict[int, _Call] = {}
        self._by_id: dict[str, _Call] = {}

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """The Mastra chunks for one stream chunk."""
        self.events += 1
        out: list[dict[str, Any]] = []
        if self.events == 1:
            self._response_fields(chunk)
        raw_usage = chunk.get("usage")
        if raw_usage and self.take_usage:
            self.outcome.usage = usage(raw_usage)
            self.outcome.raw_usage = as_json(raw_usage)
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta")
            if delta:
                self._delta(delta, out)
            finish = choice.get("finish_reason")
            if finish:
                self.outcome.raw_finish_reason = finish
            break  # one choice (n=1)
        return out

    def _response_fields(self, chunk: dict[str, Any]) -> None:
        """The response's ``id``, ``created`` and ``model``, as the provider's first chunk gives them."""
        rid, created, model = chunk.get("id"), count(chunk.get("created")), chunk.get("model")
        self.outcome.response_id = rid if isinstance(rid, str) and rid else None
        self.outcome.created_s = created
        self.outcome.model_id = model if isinstance(model, str) and model else None

    def _delta(self, delta: dict[str, Any], out: list[dict[str, Any]]) -> None:
        reasoning = delta.get("reasoning_content")
        if reasoning is None:  # some OpenAI-compatible servers call it "reasoning" (as litellm maps it)
            reasoning = delta.get("reasoning")
        if reasoning and isinstance(reasoning, str):
            self._reasoning_delta(self._reasoning.push(reasoning), out)  # U+0000 / lone halves: decisions 18, 181
        for block in delta.get("thinking_blocks") or ():  # Anthropic's thinking block, its signature last
            if isinstance(block, dict) and isinstance(block.get("signature"), str) and block["signature"]:
                self._signature = block["signature"]
        content = delta.get("content")
        if (content or delta.get("tool_calls")) and self._reasoning_open:  # reasoning comes first
            if held := self._reasoning.flush():  # a half never completed (§181)
                self._reasoning_delta(held, out)
            self._reasoning_open = False
            out.append(self._reasoning_end())
        if content and isinstance(content, str):
            self._text_delta(self._text.push(content), out)
        unindexed = 0
        for fragment in delta.get("tool_calls") or ():
            if not isinstance(fragment, dict):
                continue
            index = fragment.get("index")
            if not isinstance(index, int):  # numbered by position, as litellm numbers them
                index, unindexed = unindexed, unindexed + 1
            self._fragment(index, fragment, out)

    def _reasoning_delta(self, reasoning: str, out: list[dict[str, Any]]) -> None:
        _part_chunks("reasoning", REASONING_ID, not self._reasoning_open, reasoning, out)
        self._reasoning_open = True
        self.outcome.add_reasoning(reasoning)

    def _text_delta(self, content: str, out: list[dict[str, Any]]) -> None:
        _part_chunks("text", TEXT_ID, not self._text_open, content, out)
        self._text_open = True
        self.outcome.add_text(content)

    def _fragment(self, index: int, fragment: dict[str, Any], out: list[dict[str, Any]]) -> None:
        name, args, call_id = _fragment_fields(fragment)
        entry = self._entry(index, call_id)
        if name and not entry["toolName"]:
            entry["toolName"] = name
        if not entry["started"]:
            entry["started"] = True
            out.append({"type": "tool-call-input-streaming-start",
                        "payload": {"toolCallId": entry["toolCallId"], "toolName": entry["toolName"]}})
        if isinstance(args, dict):
            entry["argsObject"] = args
        elif args and isinstance(args, str) and (args := entry["joiner"].push(args)):
            entry["argsText"].append(args)  # joined at the end: += on a dict's str copies it all each time
            out.append({"type": "tool-call-delta",
                        "payload": {"toolCallId": entry["toolCallId"], "argsTextDelta": args,
                                    "toolName": entry["toolName"]}})

    def _entry(self, index: int, call_id: str | None) -> _Call:
        """The call a fragment belongs to: the one with its id, else the one at its index (which
        adopts the id if it had none yet), else a new one; it becomes the index's call."""
        entry = self._by_id.get(call_id) if call_id else None
        if entry is None:
            current = self._at_index.get(index)
            if current is not None and (call_id is None or not current["provided"]):
                entry = current  # continues the call at this index (and adopts its first id)
                if call_id is not None:  # the chunks already name it: the id is only recorded
                    entry["provided"] = True
                    self._by_id[call_id] = entry
        if entry is None:
            entry = {"toolCallId": call_id or f"call_{len(self._calls)}", "toolName": "", "argsText": [],
                     "argsObject": None, "provided": call_id is not None, "started": False,
                     "joiner": PieceJoiner()}
            self._calls.append(entry)
            if call_id is not None:
                self._by_id[call_id] = entry
        self._at_index[index] = entry
        return entry

    def _reasoning_end(self) -> dict[str, Any]:
        """``reasoning-end``, with Anthropic's thinking signature as Mastra carries it
        (``providerMetadata.anthropic.signature``) when the block had one."""
        payload: dict[str, Any] = {"id": REASONING_ID}
        if self._signature:
            payload["providerMetadata"] = {"anthropic": {"signature": self._signature}}
        return {"type": "reasoning-end", "payload": payload}

    def end(self) -> list[dict[str, Any]]:
        """The closing chunks of a stream that ended cleanly (text/reasoning ends, each call's
        ``tool-call-input-streaming-end`` and ``tool-call``); sets the outcome's tool calls and
        finish reason."""
        out: list[dict[str, Any]] = []
        if held := self._reasoning.flush():  # a half never completed (§181)
            self._reasoning_delta(held, out)
        if self._reasoning_open:
            self._reasoning_open = False
            out.append(self._reasoning_end())
        if held := self._text.flush():
            self._text_delta(held, out)
        if self._text_open:
            out.append({"type": "text-end", "payload": {"type": "text-end", "id": TEXT_ID}})
        for entry in self._calls:
            if held := entry["joiner"].flush():  # a half never completed (§181)
                entry["argsText"].append(held)
                out.append({"type": "tool-call-delta", "payload": {"toolCallId": entry["toolCallId"],
                            "argsTextDelta": held, "toolName": entry["toolName"]}})
            call: ToolCallPayload = {"toolCallId": entry["toolCallId"], "toolName": entry["toolName"],
                    "args": parse_args("".join(entry["argsText"]), entry["argsObject"])}
            self.outcome.tool_calls.append(call)
            out.append({"type": "tool-call-input-streaming-end", "payload": {"toolCallId": entry["toolCallId"]}})
            out.append({"type": "tool-call", "payload": dict(call)})
        self.outcome.finish_reason = finish_reason(self.outcome.raw_finish_reason, bool(self._calls))
        return out


def _part_chunks(kind: str, part_id: str, starts: bool, piece: str, out: list[dict[str, Any]]) -> None:
    """A text or reasoning part's ``<kind>-start`` (when it ``starts``) and ``<kind>-delta`` (none
    for an empty ``piece``: it was held back to be joined with the next, §181)."""
    if starts:
        out.append({"type": f"{kind}-start", "payload": {"id": part_id}})
    if piece:
        out.append({"type": f"{kind}-delta", "payload": {"id": part_id, "text": piece}})


def finish_reason(raw: str | None, had_calls: bool) -> str:
    """Mastra's finish reason of a step from the provider's (``None``: none was sent)."""
    if raw is None:
        return "tool-calls" if had_calls else "stop"
    if had_calls and raw != "length":
        return "tool-calls"
    return FINISH.get(raw, "other")


def _fragment_fields(fragment: dict[str, Any]) -> tuple[str | None, JSONValue, str | None]:
    """A tool-call fragment's ``(name, arguments, id)``, name and id cleaned (decision 18)."""
    fn = fragment.get("function") or {}
    name = fn.get("name") if isinstance(fn, dict) else None
    name = clean_text(name) if isinstance(name, str) else None
    args = fn.get("arguments") if isinstance(fn, dict) else None
    # argument text is cleaned once joined (the call's joiner, §181)
    call_id = fragment.get("id") or None
    call_id = clean_text(call_id) if isinstance(call_id, str) else None
    return name, args, call_id
