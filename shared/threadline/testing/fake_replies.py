"""What the fake model answers, shared by its two dialects (:mod:`threadline.testing.model_server`,
OpenAI's chat completions; :mod:`threadline.testing.model_server_anthropic`, Anthropic's
messages): a script's validation and its store (one queue per model name, request limits, the
journal), the reply a script plans, the stream's events and bodies, the error bodies, and the
pauses of a slow or stalled stream."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import formatdate
from typing import TYPE_CHECKING, Any, TypedDict

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from threadline.testing.model_script import JournalEntry

if TYPE_CHECKING:
    from threadline.events.json_types import JSONObject

FAILS = frozenset({"error_event", "disconnect", "truncate", "malformed", "stall"})
_NUM = (int, float)
_FIELDS: dict[str, tuple[type, ...]] = {
    "status": (int,), "error": (dict,), "headers": (dict,), "raw": (str,), "content_type": (str,),
    "delay": _NUM, "ttft": _NUM, "chunk_delay": _NUM, "text": (str,), "chunks": (list,),
    "tool_calls": (list,), "finish_reason": (str,), "usage": (dict, type(None)),
    "usage_on_finish": (bool,), "fail": (str,), "fail_after": (int,), "error_event": (dict,),
    "stall_seconds": _NUM, "times": (int,), "model": (str,), "reasoning": (str,), "split": (str,),
}
SPLITS = frozenset({"surrogates", "bytes"})
_TOOL_FIELDS = {"id", "name", "arguments", "pieces"}
_REDACTED = {"authorization", "api-key", "x-api-key", "cookie"}
_DEFAULT_ERRORS = {
    400: ("Bad request.", "invalid_request_error", None),
    401: ("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"),
    404: ("The model does not exist.", "invalid_request_error", "model_not_found"),
    429: ("Rate limit reached. Please try again later.", "requests", "rate_limit_exceeded"),
}
_SERVER_ERROR = {"message": "The server had an error while processing your request.",
                 "type": "server_error", "param": None, "code": None}
_BATCH = 256  # SSE events per write when no delay separates them
_WORDS = re.compile(r"\s*\S+")
_DONE = "data: [DONE]\n\n"


def _dumps(obj: object, ascii_only: bool = True) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=ascii_only)


def split_pairs(pieces: list[str]) -> list[str]:
    """``pieces`` cut so that every character above U+FFFF is split between its two UTF-16
    halves: the high half ends a piece, the low half starts the next (script ``split:
    "surrogates"``; each half is then sent escaped, ``"\\ud83d"`` and ``"\\ude00"``)."""
    out: list[str] = []
    for piece in pieces:
        current = ""
        for char in piece:
            code = ord(char)
            if code > 0xFFFF:
                code -= 0x10000
                out.append(current + chr(0xD800 + (code >> 10)))
                current = chr(0xDC00 + (code & 0x3FF))
            else:
                current += char
        if current or not piece:
            out.append(current)
    return out


def cut_utf8(data: bytes) -> list[bytes]:
    """``data`` cut after the first byte of every multi-byte UTF-8 sequence (script ``split:
    "bytes"``: each cut is its own network write)."""
    cuts, start = [], 0
    for i, byte in enumerate(data):
        if byte >= 0xC0:  # the lead byte of a multi-byte sequence
            cuts.append(data[start:i + 1])
            start = i + 1
    cuts.append(data[start:])
    return [c for c in cuts if c]


class InjectedDisconnect(Exception):  # noqa: N818 - a control signal for uvicorn, not an error
    """Raised inside a response body to make uvicorn drop the connection (`fail: disconnect`)."""


class _QuietInjected(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]
        return not isinstance(exc, InjectedDisconnect)


def validate_script(script: object) -> dict[str, Any]:
    """Check one script's field names and types; return it, or raise ValueError saying why."""
    if not isinstance(script, dict):
        raise ValueError("each script must be a JSON object")
    if unknown := sorted(set(script) - set(_FIELDS)):
        raise ValueError(f"unknown script fields: {unknown}")
    if (wrong := next((key for key, value in script.items() if _wrong_type(key, value)), None)) is not None:
        raise ValueError(f"script field {wrong!r} has the wrong type")
    if "fail" in script and script["fail"] not in FAILS:
        raise ValueError(f"fail must be one of {sorted(FAILS)}")
    if "split" in script and script["split"] not in SPLITS:
        raise ValueError(f"split must be one of {sorted(SPLITS)}")
    if "text" in script and "chunks" in script:
        raise ValueError("give text or chunks, not both")
    if not all(isinstance(c, str) for c in script.get("chunks", [])):
        raise ValueError("chunks must be strings")
    if not all(_valid_tool_call(call) for call in script.get("tool_calls", [])):
        raise ValueError(f"each tool call needs a name, pieces >= 1, and only the fields {sorted(_TOOL_FIELDS)}")
    if script.get("times", 1) < 1 or script.get("fail_after", 0) < 0:
        raise ValueError("times must be >= 1 and fail_after >= 0")
    return script


def _wrong_type(key: str, value: object) -> bool:
    """Whether ``value`` is not of a type script field ``key`` takes (a bool is no number)."""
    types = _FIELDS[key]
    return not isinstance(value, types) or (isinstance(value, bool) and bool not in types)


def _valid_tool_call(call: object) -> bool:
    """A scripted tool call: a ``name``, ``pieces`` >= 1 when given, no field but :data:`_TOOL_FIELDS`."""
    return (isinstance(call, dict) and isinstance(call.get("name"), str) and not set(call) - _TOOL_FIELDS
            and isinstance(call.get("pieces", 1), int) and call.get("pieces", 1) >= 1)


class ScriptStore:
    """FIFO queues of scripts (key None = global, else a model name) plus the request journal."""

    def __init__(self, journal_size: int = 10_000) -> None:
        self.queues: dict[str | None, deque[list[Any]]] = {}
        self.journal: deque[JournalEntry] = deque(maxlen=journal_size)
        self.limits: dict[str, tuple[float, deque[float]]] = {}
        """Per model: the requests/s it accepts and the arrival times of the last second."""

    def over_limit(self, model: str | None) -> bool:
        """Count a request of ``model``; True when it is over the model's requests/s limit."""
        limit = self.limits.get(model or "")
        if limit is None:
            return False
        rps, recent = limit
        now = time.monotonic()
        while recent and recent[0] <= now - 1.0:
            recent.popleft()
        if len(recent) >= rps:
            return True
        recent.append(now)
        return False

    def add(self, scripts: list[Any], model: str | None = None) -> int:
        """Validate all scripts, then append them; a script's own `model` picks its queue."""
        keyed = []
        for script in scripts:
            validate_script(script)
            key = script.get("model", model)
            if model is not None and key != model:
                raise ValueError(f"script model {key!r} differs from the queue model {model!r}")
            keyed.append((key, script))
        for key, script in keyed:
            self.queues.setdefault(key, deque()).append([script, script.get("times", 1)])
        return len(keyed)

    def take(self, model: str | None) -> dict[str, Any] | None:
        """Consume one use of the script at the head of `model`'s queue, else the global one."""
        for key in (model, None):
            queue = self.queues.get(key)
            if queue:
                entry = queue[0]
                entry[1] -= 1
                if entry[1] <= 0:
                    queue.popleft()
                return entry[0]
        return None

    def clear(self, model: str | None = None) -> None:
        """Drop the queued scripts of one model, or of every queue when model is None."""
        if model is None:
            self.queues.clear()
        else:
            self.queues.pop(model, None)

    def pending(self) -> int:
        return sum(len(q) for q in self.queues.values())


class _Call(TypedDict):
    """A planned tool call: its JSON ``arguments`` and the ``fragments`` they stream in."""

    id: str
    name: str
    arguments: str
    fragments: list[str]


@dataclass
class _Reply:
    pieces: list[str]
    calls: list[_Call]
    finish_reason: str
    usage: JSONObject | None
    reasoning: list[str]


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _plan(script: dict[str, Any], body: dict[str, Any]) -> _Reply:
    """The reply ``script`` plans for the request ``body``: its tool calls, its text in word
    pieces (by default the echo of the last user message), its finish reason and its usage."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    calls = [_planned_call(call) for call in script.get("tool_calls", [])]
    pieces = _pieces(script, calls, messages)
    usage = _usage(script, messages, pieces, calls)
    finish = script.get("finish_reason", "tool_calls" if calls else "stop")
    reasoning = _WORDS.findall(script.get("reasoning", ""))
    if script.get("split") == "surrogates":
        pieces, reasoning = split_pairs(pieces), split_pairs(reasoning)
        for call in calls:
            call["fragments"] = split_pairs(call["fragments"])
    return _Reply(pieces, calls, finish, usage, reasoning)


def _planned_call(call: dict[str, Any]) -> _Call:
    """A scripted tool call with its id and its JSON arguments cut into ``pieces`` fragments."""
    args = call.get("arguments", "{}")
    args = args if isinstance(args, str) else json.dumps(args)
    n = max(1, min(call.get("pieces", 3), len(args)))
    size = max(1, -(-len(args) // n))
    return {"id": call.get("id") or f"call_{secrets.token_hex(8)}", "name": call["name"],
            "arguments": args, "fragments": [args[i:i + size] for i in range(0, len(args), size)] or [""]}


def _pieces(script: dict[str, Any], calls: list[_Call], messages: list[dict[str, Any]]) -> list[str]:
    """The reply's text pieces: the script's chunks, its text by words, nothing beside tool calls,
    else "You said: " and the last user message."""
    if "chunks" in script:
        return list(script["chunks"])
    if "text" in script:
        text = script["text"]
    elif calls:
        text = ""
    else:
        last_user: dict[str, Any] = next((m for m in reversed(messages) if m.get("role") == "user"), {})
        text = "You said: " + _content_text(last_user.get("content"))
    return _WORDS.findall(text) or ([text] if text else [])


def _usage(script: dict[str, Any], messages: list[dict[str, Any]], pieces: list[str],
           calls: list[_Call]) -> dict[str, Any] | None:
    """Token counts (4 characters a token) overlaid by the script's ``usage``; ``None`` when it is null."""
    if script.get("usage", {}) is None:
        return None
    prompt_chars = sum(len(_content_text(m.get("content"))) for m in messages)
    out_chars = sum(map(len, pieces)) + sum(len(c["arguments"]) for c in calls)
    usage = {"prompt_tokens": max(1, prompt_chars // 4), "completion_tokens": max(1, out_chars // 4),
             **(script.get("usage") or {})}
    usage.setdefault("total_tokens", usage["prompt_tokens"] + usage["completion_tokens"])
    return usage


def _sse_events(reply: _Reply, model: str, include_usage: bool, usage_on_finish: bool,
                ascii_only: bool = True) -> list[str]:
    """Render a reply as SSE `data:` lines (without [DONE]); one json.dumps per chunk
    (``ascii_only=False``: text other than ASCII sent as UTF-8, not escaped)."""
    cid, created = "chatcmpl-" + secrets.token_hex(12), int(time.time())
    null_usage = include_usage and reply.usage is not None
    head = f'data: {{"id":"{cid}","object":"chat.completion.chunk","created":{created},"model":{json.dumps(model)},'
    tail = ',"finish_reason":null}]' + (',"usage":null' if null_usage else "") + "}\n\n"
    deltas: list[JSONObject] = [{"reasoning_content": p} for p in reply.reasoning]
    deltas += [{"content": p} for p in reply.pieces]
    for index, call in enumerate(reply.calls):
        for j, frag in enumerate(call["fragments"]):
            tc: JSONObject = ({"index": index, "id": call["id"], "type": "function",
                               "function": {"name": call["name"], "arguments": frag}} if j == 0
                              else {"index": index, "function": {"arguments": frag}})
            deltas.append({"tool_calls": [tc]})
    finish_delta: JSONObject = {}
    if deltas:
        deltas[0] = {"role": "assistant", **deltas[0]}
    else:
        finish_delta = {"role": "assistant"}
    events = [head + '"choices":[{"index":0,"delta":' + _dumps(d, ascii_only) + tail for d in deltas]
    finish: JSONObject = {"choices": [{"index": 0, "delta": finish_delta, "finish_reason": reply.finish_reason}]}
    if reply.usage is not None and usage_on_finish:
        finish["usage"] = reply.usage
    elif null_usage:
        finish["usage"] = None
    events.append(head + _dumps(finish)[1:] + "\n\n")
    if null_usage and not usage_on_finish:
        events.append(head + '"choices":[],"usage":' + _dumps(reply.usage) + "}\n\n")
    return events


def _completion(reply: _Reply, model: str) -> JSONObject:
    text = "".join(reply.pieces) if reply.pieces or not reply.calls else None
    message: JSONObject = {"role": "assistant", "content": text}
    if reply.calls:
        message["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": c["arguments"]}} for c in reply.calls]
    body: JSONObject = {"id": "chatcmpl-" + secrets.token_hex(12), "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason,
                                         "logprobs": None}]}
    if reply.usage is not None:
        body["usage"] = reply.usage
    return body


def _error_body(status: int, error: JSONObject | None) -> JSONObject:
    if error is not None:
        return error if isinstance(error.get("error"), dict) else {"error": error}
    if status >= 500 and status not in _DEFAULT_ERRORS:
        return {"error": dict(_SERVER_ERROR)}
    message, kind, code = _DEFAULT_ERRORS.get(status, (f"Error {status}.", "invalid_request_error", None))
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _error_event(script: Mapping[str, object]) -> str:
    body = script.get("error_event") or {"error": script.get("error") or _SERVER_ERROR}
    return "data: " + json.dumps(body) + "\n\n"


async def _pause(app: Starlette, seconds: float, request: Request | None = None) -> bool:
    """Sleep in 50 ms slices; return False early if the server is stopping or the client left."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if app.state.stopping() or (request is not None and await request.is_disconnected()):
            return False
        await asyncio.sleep(min(left, 0.05))
    return True


async def json_object(request: Request) -> dict[str, Any] | None:
    """The request's body when it is a JSON object, else ``None`` (both dialects answer 400)."""
    try:
        body = await request.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def rate_limited(store: ScriptStore, model: str | None, request: Request, body: Mapping[str, object]) -> Response | None:
    """A 429 (``Retry-After: 1``, journaled with ``limited: true``) when ``model`` is over its
    requests/s limit (``POST /_fake/limit``), else ``None``."""
    if not store.over_limit(model):
        return None
    store.journal.append({"model": model, "path": request.url.path, "stream": bool(body.get("stream")),
                          "scripted": False, "limited": True, "headers": {}, "body": {}, "time": time.time()})
    return JSONResponse(_error_body(429, None), 429, {"retry-after": "1"})


_AT_DATE = re.compile(r"@date([+-]\d+(?:\.\d+)?)?")


def answer_headers(script_headers: Mapping[str, object], now: float) -> dict[str, str]:
    """A script's ``headers`` as sent: a value ``@date`` / ``@date+4`` / ``@date-30`` becomes the
    HTTP-date of the FM's clock ``now`` (Unix seconds) plus that many seconds (a ``Retry-After``
    date relative to the answer); any other value is sent as it is. A script's ``date`` replaces
    the FM's own ``Date`` header (:class:`DateHeader`)."""
    out: dict[str, str] = {}
    for name, value in script_headers.items():
        text = str(value)
        if (m := _AT_DATE.fullmatch(text)) is not None:
            text = formatdate(now + float(m.group(1) or 0), usegmt=True)
        out[str(name)] = text
    return out


class DateHeader:
    """ASGI middleware: every answer carries one ``Date`` (the FM's clock), unless the route set
    its own (uvicorn's default ``Date`` is turned off, so a scripted ``Date`` is not doubled)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_date(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if not any(k.lower() == b"date" for k, _ in headers):
                    headers.append((b"date", formatdate(time.time(), usegmt=True).encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_date)
