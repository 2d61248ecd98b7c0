"""How :func:`threadline.runtime.model.llm.stream_model` reads the stream ``litellm.acompletion``
returned: as plain chunk dicts (the provider's JSON: ``{"choices": [{"delta": …,
"finish_reason": …}], "usage": …}``), by the cheapest of three paths that is safe for it.

1. **raw** — the provider stream litellm opened is an OpenAI-compatible ``openai.AsyncStream``
   of ``ChatCompletionChunk`` in the SDK's default SSE mode, and no litellm callback is set: the
   SSE bytes of its HTTP response are decoded here and every ``data:`` event parsed with orjson
   (:func:`sse_json`). The openai SDK would build a ``ChatCompletionChunk`` model per chunk, ~100
   µs of CPU each against ~2 µs for this (bench/results/HISTORY.md, "The model call").
2. **sdk** — the same stream, but read through the SDK (an ``AsyncStream`` of another chunk type
   or mode, or a client with its own decoder): its chunk objects turned into the same dicts.
3. **wrapper** — litellm's ``CustomStreamWrapper`` (litellm callbacks are configured, or the
   provider stream is not an ``openai.AsyncStream``), so callbacks see every call.

On paths 1 and 2 a failure is raised as litellm's wrapper raises it (mapped by
``exception_type``; a client error as is, anything else as ``MidStreamFallbackError``) so that
``llm.classify`` sees the same exceptions on every path. What a stream's end means (an end
without a finish reason, with or without ``[DONE]``; no event at all; a cut-off) is decided the same way on every path
(:mod:`threadline.runtime.model.llm_normalise`); under the wrapper :func:`watch_raw` sees the raw
stream for it. ``tests/unit/test_llm_direct_stream.py`` holds the parity test.
Lost on paths 1 and 2: litellm's "100 identical chunks" repetition guard.

litellm's internals this reading relies on (``exception_type``, the callback lists) are behind
:mod:`threadline.runtime.model._litellm_private`.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import ssl
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from typing import Any, NotRequired, TypedDict

import anyio
import httpx
import litellm
import openai
import orjson
from litellm import exceptions as lx
from openai.types.chat import ChatCompletionChunk
from pydantic import BaseModel

from threadline.runtime.model._litellm_private import NoopCallback, callbacks_configured, exception_type

# What the SDK maps to APITimeoutError / APIConnectionError while reading a stream's body: httpx's
# errors, and those of httpx2 (the transport of openai 3.x) when it is installed.
_TIMEOUTS: tuple[type[BaseException], ...] = (httpx.TimeoutException,)
_REQUEST_ERRORS: tuple[type[BaseException], ...] = (httpx.RequestError, ssl.SSLError, anyio.EndOfStream)
_CUT_OFF: tuple[type[BaseException], ...] = (httpx.RemoteProtocolError, httpx.ReadError, anyio.EndOfStream,
                                            anyio.BrokenResourceError, ssl.SSLError)
try:
    import httpx2

    _TIMEOUTS += (httpx2.TimeoutException,)
    _REQUEST_ERRORS += (httpx2.RequestError,)
    _CUT_OFF += (httpx2.RemoteProtocolError, httpx2.ReadError)
except ImportError:  # pragma: no cover - depends on the installed openai
    pass
TIMEOUTS: tuple[type[BaseException], ...] = (*_TIMEOUTS, openai.APITimeoutError, lx.Timeout)
"""Errors meaning a read took longer than the per-read timeout (kind ``timeout``)."""
CUT_OFF = _CUT_OFF
"""Errors meaning an opened stream was cut off: the connection dropped, the body incomplete."""
_SDK_DECODER: type[object] | None = getattr(importlib.import_module("openai._streaming"), "SSEDecoder", None)
"""The SDK's default SSE decoder: a stream the client gave another decoder is read through the SDK."""
_DRAIN_S = 0.1
"""After ``[DONE]`` the rest of an HTTP/1.1 body is read for this long, so the connection can be
reused (as the SDK does)."""

class StreamWatch(TypedDict):
    """What a model stream's reading saw (:func:`watch_raw`, :func:`provider_chunks`)."""

    events: int
    """Raw chunks read."""
    clean_end: bool
    """The raw stream ended without an error."""
    done: NotRequired[bool]
    """The ``data: [DONE]`` sentinel was read (the stream said it ended; §20)."""
    usage: NotRequired[bool]
    """The provider reported usage (else a usage litellm computed is not taken)."""
    last_usage: NotRequired[object]
    """The provider's last usage report, as it came (``None``: none)."""


def register_noop_callback() -> None:
    """Register one no-op litellm callback (the processor-worker's test switch
    ``THREADLINE_LITELLM_NOOP_CALLBACK``): from then on :func:`reader` answers ``"wrapper"``."""
    if not any(isinstance(cb, NoopCallback) for cb in litellm.callbacks):
        litellm.callbacks.append(NoopCallback())


def reader(response: object) -> str:
    """Which path reads ``response`` (what ``litellm.acompletion(stream=True)`` returned):
    ``"raw"``, ``"sdk"`` or ``"wrapper"`` (module docstring)."""
    stream = getattr(response, "completion_stream", None)
    if not isinstance(stream, openai.AsyncStream) or callbacks_configured():
        return "wrapper"
    options = getattr(stream, "_options", None)
    default_mode = options is None or (getattr(options, "stream_mode", "legacy") == "legacy"
                                       and not getattr(options, "synthesize_event_and_data", False))
    if (_SDK_DECODER is not None and type(getattr(stream, "_decoder", None)) is _SDK_DECODER and default_mode
            and getattr(stream, "_cast_to", None) is ChatCompletionChunk
            and callable(getattr(getattr(stream, "response", None), "aiter_bytes", None))):
        return "raw"
    return "sdk"


async def sse_json(response: Any, watch: StreamWatch | None = None) -> AsyncIterator[object]:
    """The JSON of every server-sent event of ``response`` (an httpx-style response whose
    ``aiter_bytes()`` yields the body) up to ``data: [DONE]`` (``watch["done"]`` set when read).

    Decodes as the openai SDK does: CR, LF or CRLF line ends; ``data:`` lines of one event joined
    with ``\\n``; comments and unknown fields ignored; an event is dispatched at a blank line when
    it has data, an event name, an id (sticky, as in the SDK) or a retry; an unterminated last
    event is dropped.

    Raises:
        openai.APIError: an in-band error event (``{"error": {…}}``), with ``body`` the error.
        openai.APITimeoutError / openai.APIConnectionError: the body could not be read.
        json.JSONDecodeError: an event's data is not JSON (an empty data included).
    """
    chunks = response.aiter_bytes()
    decoder, done = _SSEDecoder(), False
    try:
        async for block in chunks:
            for line in decoder.lines(block):
                if line:
                    decoder.field(line)
                    continue
                taken = decoder.dispatch()
                if taken is None:
                    continue
                if taken[0].startswith(b"[DONE]"):
                    done = True
                    if watch is not None:
                        watch["done"] = True
                    break
                yield _event_json(*taken, response)
            if done:
                break
        if done and getattr(response, "http_version", None) == "HTTP/1.1":
            await _drain(chunks)
    except _TIMEOUTS as exc:
        raise openai.APITimeoutError(request=response.request) from exc
    except _REQUEST_ERRORS as exc:
        raise openai.APIConnectionError(request=response.request) from exc


class _SSEDecoder:
    """The line and field rules of :func:`sse_json`, one body block at a time."""

    __slots__ = ("data", "event", "has_id", "pending", "retry", "skip_lf")

    def __init__(self) -> None:
        self.pending, self.skip_lf = b"", False
        self.data: list[bytes] = []
        self.event, self.has_id, self.retry = b"", False, False

    def lines(self, block: bytes) -> list[bytes]:
        """The complete lines ``block`` ends (CR, LF or CRLF); an unterminated tail waits for
        the next block."""
        if not block:
            return []
        if self.skip_lf:  # the previous block ended in CR: a leading LF completes that CRLF
            self.skip_lf = False
            if block[0] == 10:
                block = block[1:]
        if self.pending:
            block = self.pending + block
        if b"\r" in block:
            self.skip_lf = block[-1] == 13
            block = block.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = block.split(b"\n")
        self.pending = lines.pop()
        return lines

    def field(self, line: bytes) -> None:
        """A non-blank line: a ``data``, ``event``, ``id`` or ``retry`` field (a comment or an
        unknown field is ignored)."""
        if line.startswith(b"data:"):
            value = line[5:]
            self.data.append(value[1:] if value.startswith(b" ") else value)
            return
        if line[0] == 58:  # a ":" comment
            return
        name, _, value = line.partition(b":")
        value = value[1:] if value.startswith(b" ") else value
        if name == b"data":  # a bare "data" line: an empty data line
            self.data.append(value)
        elif name == b"event":
            self.event = value
        elif name == b"id":
            self.has_id = self.has_id or b"\0" not in value
        elif name == b"retry":
            self.retry = _is_int(value)

    def dispatch(self) -> tuple[bytes, str | None] | None:
        """A blank line: the event's data and its Assistants ``thread.*`` name, if any (``None``:
        nothing to dispatch); the event's fields reset (the id stays, as in the SDK)."""
        data, event = self.data, self.event
        if not data and not event and not self.has_id and not self.retry:
            return None
        self.data, self.event, self.retry = [], b"", False
        payload = data[0] if len(data) == 1 else b"\n".join(data)
        return payload, (event.decode() if event.startswith(b"thread.") else None)


def _event_json(payload: bytes, thread_event: str | None, response: Any) -> object:
    """An event's JSON (an Assistants event wrapped as the SDK yields it); an in-band error
    event raises ``openai.APIError``."""
    obj = _loads(payload)
    if thread_event:  # an Assistants event: no chat chunk (no choices), as the SDK yields it
        return {"data": obj, "event": thread_event}
    if isinstance(obj, dict) and obj.get("error"):
        error = obj["error"]
        message = error.get("message") if isinstance(error, dict) else None
        raise openai.APIError(message if message and isinstance(message, str) else "An error occurred during streaming",
                              response.request, body=error)
    return obj


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    """Read the rest of an HTTP/1.1 body for up to ``_DRAIN_S``, so the connection can be reused."""
    try:
        async with asyncio.timeout(_DRAIN_S):
            async for _ in chunks:
                pass
    except (TimeoutError, *_REQUEST_ERRORS):  # type: ignore[misc]  # a tuple of exception classes
        pass


def _loads(payload: bytes) -> object:
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:  # what orjson rejects and json takes (NaN, integers over 64 bits)
        return json.loads(payload)


def _is_int(value: bytes) -> bool:
    try:
        int(value)
    except ValueError:
        return False
    return True


async def provider_chunks(stream: Any, model: str, *, raw: bool,
                          watch: StreamWatch | None = None) -> AsyncIterator[dict[str, Any]]:
    """The chunk dicts of the provider stream ``stream`` (an ``openai.AsyncStream``): decoded
    here when ``raw``, else built by the SDK and converted. A failure is raised as litellm's
    wrapper raises it; ``finish_reason: abort`` fails as in the wrapper. Whether a stream that
    ended without a finish reason is complete is decided by the caller (docs/decisions.md §20)
    from ``watch`` (as :func:`watch_raw` fills it): ``events`` (chunks read), ``clean_end`` and
    ``done`` (``[DONE]`` was read). The stream is closed when this generator ends."""
    provider, _, name = model.partition("/") if "/" in model else ("openai", "", model)
    sent = False
    seen: StreamWatch = watch if watch is not None else {"events": 0, "clean_end": False}
    if not raw:
        see_done(stream, seen)
    source: AsyncIterator[Any] = sse_json(stream.response, seen) if raw else _sdk_dicts(stream)
    try:
        async for chunk in source:
            if not isinstance(chunk, dict):  # JSON that is not an object: fails as in litellm's wrapper
                raise TypeError(f"stream chunk is not a JSON object: {type(chunk).__name__}")
            for choice in chunk.get("choices") or ():
                if choice.get("finish_reason") == "abort":
                    raise lx.InternalServerError(message="Upstream generation aborted (finish_reason=abort)",
                                                 model=name, llm_provider=provider)
            sent = True
            seen["events"] += 1
            yield chunk
        seen["clean_end"] = True
    except (GeneratorExit, asyncio.CancelledError):
        raise
    except Exception as exc:
        raise _stream_failure(exc, name, provider, sent) from exc
    finally:
        await source.aclose()  # type: ignore[attr-defined]  # both sources are async generators
        await stream.close()


def see_done(stream: object, watch: StreamWatch) -> None:
    """Set ``watch["done"]`` when the openai SDK stream ``stream`` reads ``data: [DONE]`` (the SDK
    swallows the sentinel; its event iterator, read once the stream is first iterated, is
    watched). A stream without that iterator never reports ``done``: only a finish reason then
    says that it ended."""
    events = getattr(stream, "_iter_events", None)
    if not callable(events):
        return

    async def spy() -> AsyncIterator[Any]:
        async for sse in events():
            if getattr(sse, "data", "").startswith("[DONE]"):
                watch["done"] = True
            yield sse

    stream._iter_events = spy  # type: ignore[attr-defined]  # an instance attribute shadows the SDK's method


async def _sdk_dicts(stream: Any) -> AsyncIterator[dict[str, Any]]:
    async for chunk in stream:
        yield as_dict(chunk) if isinstance(chunk, BaseModel) else chunk


async def wrapper_chunks(response: AsyncIterable[object]) -> AsyncIterator[dict[str, Any]]:
    """litellm's ``CustomStreamWrapper`` chunks as dicts."""
    async for chunk in response:
        yield as_dict(chunk)


def as_dict(chunk: object) -> dict[str, Any]:
    """A chunk object (the SDK's ``ChatCompletionChunk`` or litellm's ``ModelResponseStream``)
    as the dict of the fields ``stream_model`` reads; ``usage`` stays the object it was."""
    choices = []
    for choice in getattr(chunk, "choices", None) or ():
        delta = getattr(choice, "delta", None)
        fields = None
        if delta is not None:
            calls = []
            for tc in getattr(delta, "tool_calls", None) or ():
                fn = getattr(tc, "function", None)
                calls.append({"index": getattr(tc, "index", None), "id": getattr(tc, "id", None),
                              "function": {"name": getattr(fn, "name", None),
                                           "arguments": getattr(fn, "arguments", None)}})
            fields = {"reasoning_content": getattr(delta, "reasoning_content", None),
                      "reasoning": getattr(delta, "reasoning", None),
                      "content": getattr(delta, "content", None), "tool_calls": calls,
                      "thinking_blocks": getattr(delta, "thinking_blocks", None)}
        choices.append({"delta": fields, "finish_reason": getattr(choice, "finish_reason", None)})
    return {"usage": getattr(chunk, "usage", None), "choices": choices, "id": getattr(chunk, "id", None),
            "created": getattr(chunk, "created", None), "model": getattr(chunk, "model", None)}


def watch_raw(response: Any) -> StreamWatch:
    """Watch the provider's raw stream under litellm's wrapper: ``usage`` (did the provider
    report usage, so a usage litellm computed itself is not mistaken for one), ``events`` (raw
    chunks read), ``clean_end`` (the raw stream ended without an error) and ``last_usage`` (the
    provider's last usage report, as it came) and ``done`` (``[DONE]`` was read: :func:`see_done`).
    A wrapper whose raw stream cannot be watched is trusted: usage taken, one event assumed, a
    clean end with ``[DONE]``."""
    seen: StreamWatch = {"usage": False, "events": 0, "clean_end": False, "last_usage": None, "done": False}
    raw = getattr(response, "completion_stream", None)
    if raw is None:
        seen.update({"usage": True, "events": 1, "clean_end": True, "done": True})
        return seen
    see_done(raw, seen)

    async def spy() -> AsyncIterator[object]:
        async for chunk in raw:
            reported = chunk.get("usage") if isinstance(chunk, dict) else getattr(chunk, "usage", None)
            if reported:
                seen["usage"], seen["last_usage"] = True, reported
            seen["events"] += 1
            yield chunk
        seen["clean_end"] = True

    response.completion_stream = spy()
    return seen


def clean_eof_refused(exc: BaseException, watch: Mapping[str, object]) -> bool:
    """Is ``exc`` litellm's wrapper refusing a raw stream that ended cleanly, after events,
    without a finish reason ("Stream ended before a finish_reason was received")? (Whether that
    stream is complete is the caller's call: it is when ``[DONE]`` was read, §20.)"""
    if not watch.get("clean_end") or not watch.get("events"):
        return False
    return any(_EOF_REFUSAL in str(x) for x in exception_chain(exc))  # litellm keeps the wording when it maps


def exception_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and every exception behind it (``original_exception`` as litellm wraps them,
    ``__cause__``, ``__context__``), each once."""
    out: list[BaseException] = []
    stack: list[BaseException | None] = [exc]
    seen: set[int] = set()
    while stack:
        x = stack.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        out.append(x)
        stack += [getattr(x, "original_exception", None), x.__cause__, x.__context__]
    return out


_EOF_REFUSAL = "Stream ended before a finish_reason was received"


def _stream_failure(exc: Exception, model: str, provider: str, sent: bool) -> Exception:
    if isinstance(exc, lx.MidStreamFallbackError):
        mapped: Exception = exc
    else:
        try:
            mapped = exception_type(model=model, original_exception=exc, custom_llm_provider=provider)
        except Exception as raised:  # noqa: BLE001 - exception_type raises the mapped exception
            mapped = raised
    if isinstance(mapped, lx.MidStreamFallbackError):
        return mapped
    status = _status_of(mapped) or _status_of(exc)
    timeout = isinstance(exc, httpx.TimeoutException)
    if not timeout and status is not None and 400 <= status < 500 and status != 429:
        return mapped
    return lx.MidStreamFallbackError(message=str(mapped), model=model, llm_provider=provider,
                                     original_exception=mapped, is_pre_first_chunk=not sent)


def _status_of(exc: BaseException) -> int | None:
    for candidate in (getattr(exc, "status_code", None), getattr(getattr(exc, "response", None), "status_code", None)):
        try:
            if candidate is not None:
                return int(candidate)
        except (TypeError, ValueError):
            continue
    return None
