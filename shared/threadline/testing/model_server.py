"""A scriptable fake of the OpenAI chat-completions API, for tests, benchmarks and the demo.

Threadline reaches models only through litellm (`model="openai/<name>"`, `api_base=<url>/v1`);
this server stands in for the provider. Tests queue *scripts* that say what the next responses
are, including every failure shape litellm treats differently (docs: shared/notes/model-server.md).

Run:        python -m threadline.testing.model_server --port 18080 [--host 127.0.0.1]
In-process: `srv = start_in_thread(); ...; srv.stop()` (port 0 picks a free port).

Endpoints
  POST   /v1/chat/completions  stream (SSE) and non-stream
  POST   /v1/messages          Anthropic's Messages API, same scripts (model_server_anthropic)
  GET    /v1/models
  POST   /v1/audio/speech, /v1/audio/transcriptions   voice (model_server_audio)
  POST   /_fake/script         {"scripts": [script, ...], "model": name | null}: append to a FIFO
                               (that model's queue when given, else the global one)
  DELETE /_fake/script         drop queued scripts (all, or only `?model=`)
  GET    /_fake/requests       {"requests": [{model, path, stream, scripted, headers, body, time}]},
                               `?model=` filters; time is Unix seconds; auth headers are redacted;
                               an OpenAI request that streams (or is held by `delay`) also gets
                               `closed_by` ("server" | "client": who ended it) and `closed_at`
  POST   /_fake/limit          {"model": name, "rps": n | null}: answer 429 (Retry-After: 1) above n
                               requests/s of that model; journaled with `limited: true`
  POST   /_fake/reset          drop scripts, limits and the journal
  GET    /_fake/health         {"status": "ok", "queued": n}
  GET    /_fake/pairing        {"count": n, "violations": [...]}: requests refused (400) for a broken
                               tool-call pairing (module pairing); POST reads and clears it

A request takes the head of its model's queue, else of the global queue, else gets the default
reply: "You said: <last user message>" in word chunks, finish "stop", estimated usage.

Script fields (all optional; times in seconds):
  status, error {message, type, code}, headers {name: value}  HTTP error (error alone means 500)
  raw + content_type         send this body verbatim (status defaults to 200)
  delay                      wait before the headers (a hang; ends if the client leaves)
  ttft, chunk_delay          wait before the first chunk / between chunks
  text | chunks              reply text, split on words / given pieces (default: the echo)
  tool_calls [{id?, name, arguments: str | object, pieces (default 3)}]  streamed as fragments
  reasoning                  streamed first, in word chunks, as `reasoning_content` deltas
  finish_reason              default "stop", or "tool_calls" when tool calls are scripted
  usage {prompt_tokens, completion_tokens, prompt_tokens_details?, completion_tokens_details?} | null
                             null sends no usage at all
  usage_on_finish            put usage on the finish chunk instead of a final `choices: []` chunk
  fail + fail_after (n events, default 0): error_event | disconnect | truncate | malformed | stall
  error_event                in-band body, default {"error": <error or a server_error>}
  stall_seconds              length of a `stall` (default 3600); the stream resumes after it
  times (default 1), model   repeat the script; match only requests for this model
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from threadline.testing import pairing

log = logging.getLogger(__name__)

FAILS = frozenset({"error_event", "disconnect", "truncate", "malformed", "stall"})
_NUM = (int, float)
_FIELDS: dict[str, tuple[type, ...]] = {
    "status": (int,), "error": (dict,), "headers": (dict,), "raw": (str,), "content_type": (str,),
    "delay": _NUM, "ttft": _NUM, "chunk_delay": _NUM, "text": (str,), "chunks": (list,),
    "tool_calls": (list,), "finish_reason": (str,), "usage": (dict, type(None)),
    "usage_on_finish": (bool,), "fail": (str,), "fail_after": (int,), "error_event": (dict,),
    "stall_seconds": _NUM, "times": (int,), "model": (str,), "reasoning": (str,),
}
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


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


class InjectedDisconnect(Exception):  # noqa: N818 - a control signal for uvicorn, not an error
    """Raised inside a response body to make uvicorn drop the connection (`fail: disconnect`)."""


class _QuietInjected(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]
        return not isinstance(exc, InjectedDisconnect)


def validate_script(script: Any) -> dict[str, Any]:
    """Check one script's field names and types; return it, or raise ValueError saying why."""
    if not isinstance(script, dict):
        raise ValueError("each script must be a JSON object")
    if unknown := sorted(set(script) - set(_FIELDS)):
        raise ValueError(f"unknown script fields: {unknown}")
    for key, value in script.items():
        if not isinstance(value, _FIELDS[key]) or (isinstance(value, bool) and bool not in _FIELDS[key]):
            raise ValueError(f"script field {key!r} has the wrong type")
    if "fail" in script and script["fail"] not in FAILS:
        raise ValueError(f"fail must be one of {sorted(FAILS)}")
    if "text" in script and "chunks" in script:
        raise ValueError("give text or chunks, not both")
    if not all(isinstance(c, str) for c in script.get("chunks", [])):
        raise ValueError("chunks must be strings")
    for call in script.get("tool_calls", []):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or set(call) - _TOOL_FIELDS \
                or not isinstance(call.get("pieces", 1), int) or call.get("pieces", 1) < 1:
            raise ValueError(f"each tool call needs a name, pieces >= 1, and only the fields {sorted(_TOOL_FIELDS)}")
    if script.get("times", 1) < 1 or script.get("fail_after", 0) < 0:
        raise ValueError("times must be >= 1 and fail_after >= 0")
    return script


class ScriptStore:
    """FIFO queues of scripts (key None = global, else a model name) plus the request journal."""

    def __init__(self, journal_size: int = 10_000) -> None:
        self.queues: dict[str | None, deque[list[Any]]] = {}
        self.journal: deque[dict[str, Any]] = deque(maxlen=journal_size)
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


@dataclass
class _Reply:
    pieces: list[str]
    calls: list[dict[str, Any]]
    finish_reason: str
    usage: dict[str, Any] | None
    reasoning: list[str]


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _plan(script: dict[str, Any], body: dict[str, Any]) -> _Reply:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    calls = []
    for call in script.get("tool_calls", []):
        args = call.get("arguments", "{}")
        args = args if isinstance(args, str) else json.dumps(args)
        n = max(1, min(call.get("pieces", 3), len(args)))
        size = max(1, -(-len(args) // n))
        calls.append({"id": call.get("id") or f"call_{secrets.token_hex(8)}", "name": call["name"],
                      "arguments": args, "fragments": [args[i:i + size] for i in range(0, len(args), size)] or [""]})
    if "chunks" in script:
        pieces = list(script["chunks"])
    else:
        if "text" in script:
            text = script["text"]
        elif calls:
            text = ""
        else:
            last_user = next((m for m in reversed(messages) if m.get("role") == "user"), {})
            text = "You said: " + _content_text(last_user.get("content"))
        pieces = _WORDS.findall(text) or ([text] if text else [])
    usage = None
    if script.get("usage", {}) is not None:
        prompt_chars = sum(len(_content_text(m.get("content"))) for m in messages)
        out_chars = sum(map(len, pieces)) + sum(len(c["arguments"]) for c in calls)
        usage = {"prompt_tokens": max(1, prompt_chars // 4), "completion_tokens": max(1, out_chars // 4),
                 **(script.get("usage") or {})}
        usage.setdefault("total_tokens", usage["prompt_tokens"] + usage["completion_tokens"])
    finish = script.get("finish_reason", "tool_calls" if calls else "stop")
    return _Reply(pieces, calls, finish, usage, _WORDS.findall(script.get("reasoning", "")))


def _sse_events(reply: _Reply, model: str, include_usage: bool, usage_on_finish: bool) -> list[str]:
    """Render a reply as SSE `data:` lines (without [DONE]); one json.dumps per chunk."""
    cid, created = "chatcmpl-" + secrets.token_hex(12), int(time.time())
    null_usage = include_usage and reply.usage is not None
    head = f'data: {{"id":"{cid}","object":"chat.completion.chunk","created":{created},"model":{json.dumps(model)},'
    tail = ',"finish_reason":null}]' + (',"usage":null' if null_usage else "") + "}\n\n"
    deltas: list[dict[str, Any]] = [{"reasoning_content": p} for p in reply.reasoning]
    deltas += [{"content": p} for p in reply.pieces]
    for index, call in enumerate(reply.calls):
        for j, frag in enumerate(call["fragments"]):
            tc = ({"index": index, "id": call["id"], "type": "function",
                   "function": {"name": call["name"], "arguments": frag}} if j == 0
                  else {"index": index, "function": {"arguments": frag}})
            deltas.append({"tool_calls": [tc]})
    finish_delta: dict[str, Any] = {}
    if deltas:
        deltas[0] = {"role": "assistant", **deltas[0]}
    else:
        finish_delta = {"role": "assistant"}
    events = [head + '"choices":[{"index":0,"delta":' + _dumps(d) + tail for d in deltas]
    finish: dict[str, Any] = {"choices": [{"index": 0, "delta": finish_delta, "finish_reason": reply.finish_reason}]}
    if reply.usage is not None and usage_on_finish:
        finish["usage"] = reply.usage
    elif null_usage:
        finish["usage"] = None
    events.append(head + _dumps(finish)[1:] + "\n\n")
    if null_usage and not usage_on_finish:
        events.append(head + '"choices":[],"usage":' + _dumps(reply.usage) + "}\n\n")
    return events


def _completion(reply: _Reply, model: str) -> dict[str, Any]:
    text = "".join(reply.pieces) if reply.pieces or not reply.calls else None
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if reply.calls:
        message["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": c["arguments"]}} for c in reply.calls]
    body = {"id": "chatcmpl-" + secrets.token_hex(12), "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason,
                                         "logprobs": None}]}
    if reply.usage is not None:
        body["usage"] = reply.usage
    return body


def _error_body(status: int, error: dict[str, Any] | None) -> dict[str, Any]:
    if error is not None:
        return error if isinstance(error.get("error"), dict) else {"error": error}
    if status >= 500 and status not in _DEFAULT_ERRORS:
        return {"error": dict(_SERVER_ERROR)}
    message, kind, code = _DEFAULT_ERRORS.get(status, (f"Error {status}.", "invalid_request_error", None))
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _error_event(script: dict[str, Any]) -> str:
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


def _flush(buf: list[str]) -> bytes:
    data = "".join(buf).encode()
    buf.clear()
    return data


async def _stream(events: list[str], script: dict[str, Any], app: Starlette) -> AsyncIterator[bytes]:
    """Yield SSE bytes in batches, applying ttft, chunk_delay and the scripted fault."""
    events = [*events, _DONE]
    fail = script.get("fail")
    fail_at = min(script.get("fail_after", 0), len(events) - 1) if fail else -1
    delay = script.get("chunk_delay", 0)
    if script.get("ttft") and not await _pause(app, script["ttft"]):
        return
    buf: list[str] = []
    for i, event in enumerate(events):
        if i == fail_at:
            if buf:
                yield _flush(buf)
            if fail == "disconnect":
                raise InjectedDisconnect("scripted disconnect")
            if fail == "error_event":
                yield _error_event(script).encode()
            elif fail == "malformed":
                yield b'data: {"id":"chatcmpl-broken","choices":[{"index":0,"delta":{"content":"unterminat\n\n'
            if fail != "stall" or not await _pause(app, script.get("stall_seconds", 3600)):
                return
        if delay and i:
            if buf:
                yield _flush(buf)
            if not await _pause(app, delay):
                return
        buf.append(event)
        if len(buf) >= _BATCH:
            yield _flush(buf)
    if buf:
        yield _flush(buf)


def _closed(entry: dict[str, Any], by: str) -> None:
    entry["closed_by"], entry["closed_at"] = by, time.time()


async def _journaled(body: AsyncIterator[bytes], entry: dict[str, Any]) -> AsyncIterator[bytes]:
    """``body``, noting in the request's journal entry who ended it and when: ``closed_by``
    ``"server"`` (the body was sent, or its scripted fault ended it) or ``"client"`` (the client
    closed the connection first), and ``closed_at`` (epoch seconds)."""
    try:
        async for block in body:
            yield block
    except InjectedDisconnect:
        _closed(entry, "server")
        raise
    except BaseException:
        _closed(entry, "client")
        raise
    _closed(entry, "server")


async def _faulty_body(data: bytes, script: dict[str, Any], app: Starlette) -> AsyncIterator[bytes]:
    """A non-stream body with the scripted fault: half the JSON, then the fault."""
    if script["fail"] == "error_event":
        yield _error_event(script)[6:].encode()
        return
    yield data[: len(data) // 2]
    if script["fail"] == "disconnect":
        raise InjectedDisconnect("scripted disconnect")
    if script["fail"] == "stall" and await _pause(app, script.get("stall_seconds", 3600)):
        yield data[len(data) // 2:]


async def json_object(request: Request) -> dict[str, Any] | None:
    """The request's body when it is a JSON object, else ``None`` (both dialects answer 400)."""
    try:
        body = await request.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


async def chat_completions(request: Request) -> Response:
    """Answer one chat completion from the next matching script, or with the default echo."""
    app, store = request.app, request.app.state.store
    body = await json_object(request)
    if body is None:
        error = {"message": "The body must be a JSON object.", "type": "invalid_request_error"}
        return JSONResponse({"error": error}, 400)
    model = body["model"] if isinstance(body.get("model"), str) else None
    if (unpaired := pairing.openai_pairing_error(body.get("messages"))) is not None:
        pairing.refuse(request, body, model, unpaired)
        return JSONResponse({"error": {"message": unpaired, "type": "invalid_request_error", "param": "messages",
                                       "code": None}}, 400)
    limited = rate_limited(store, model, request, body)
    if limited is not None:
        return limited
    script = store.take(model)
    headers = {k: ("<redacted>" if k in _REDACTED else v) for k, v in request.headers.items()}
    entry = {"model": model, "path": request.url.path, "stream": bool(body.get("stream")),
             "scripted": script is not None, "headers": headers, "body": body, "time": time.time()}
    store.journal.append(entry)
    log.debug("chat completion model=%s stream=%s scripted=%s", model, bool(body.get("stream")), script is not None)
    script = script or {}
    out_headers = {str(k): str(v) for k, v in script.get("headers", {}).items()}
    if script.get("delay") and not await _pause(app, script["delay"], request):
        _closed(entry, "client")
        return Response(status_code=499)
    if "raw" in script:
        media_type = script.get("content_type", "application/json")
        return Response(script["raw"], script.get("status", 200), out_headers, media_type)
    status = script.get("status", 500 if "error" in script and "fail" not in script else 200)
    if status >= 400:
        return JSONResponse(_error_body(status, script.get("error")), status, out_headers)
    reply = _plan(script, body)
    if body.get("stream"):
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        events = _sse_events(reply, model or "fake-model", include_usage, script.get("usage_on_finish", False))
        return StreamingResponse(_journaled(_stream(events, script, app), entry), status,
                                 {"cache-control": "no-cache", **out_headers}, media_type="text/event-stream")
    data = json.dumps(_completion(reply, model or "fake-model")).encode()
    if "fail" in script:
        return StreamingResponse(_faulty_body(data, script, app), status, out_headers, media_type="application/json")
    if script.get("ttft") and not await _pause(app, script["ttft"], request):
        return Response(status_code=499)
    return Response(data, status, out_headers, media_type="application/json")


def rate_limited(store: ScriptStore, model: str | None, request: Request, body: dict[str, Any]) -> Response | None:
    """A 429 (``Retry-After: 1``, journaled with ``limited: true``) when ``model`` is over its
    requests/s limit (``POST /_fake/limit``), else ``None``."""
    if not store.over_limit(model):
        return None
    store.journal.append({"model": model, "path": request.url.path, "stream": bool(body.get("stream")),
                          "scripted": False, "limited": True, "headers": {}, "body": {}, "time": time.time()})
    return JSONResponse(_error_body(429, None), 429, {"retry-after": "1"})


async def set_limit(request: Request) -> Response:
    """``{"model": name, "rps": n}``: answer 429 above n requests/s of that model (``rps: null`` lifts it)."""
    try:
        payload = await request.json()
        model, rps = payload["model"], payload.get("rps")
        if not isinstance(model, str) or not (rps is None or (isinstance(rps, int | float) and rps > 0)):
            raise ValueError
    except (ValueError, KeyError, TypeError):
        return JSONResponse({"error": {"message": 'the body must be {"model": name, "rps": n > 0 | null}',
                                       "type": "invalid_request_error"}}, 400)
    if rps is None:
        request.app.state.store.limits.pop(model, None)
    else:
        request.app.state.store.limits[model] = (float(rps), deque())
    return JSONResponse({"model": model, "rps": rps})


async def list_models(request: Request) -> Response:
    store = request.app.state.store
    names = {k for k in store.queues if k} | {e["model"] for e in store.journal if e["model"]} | {"fake-model"}
    return JSONResponse({"object": "list", "data": [
        {"id": n, "object": "model", "created": 0, "owned_by": "threadline-fake"} for n in sorted(names)]})


async def add_scripts(request: Request) -> Response:
    try:
        payload = await request.json()
        payload = {"scripts": payload} if isinstance(payload, list) else payload
        if not isinstance(payload, dict) or not isinstance(payload.get("scripts"), list) \
                or not isinstance(payload.get("model"), (str, type(None))):
            raise ValueError('the body must be {"scripts": [...], "model": optional name}')
        queued = request.app.state.store.add(payload["scripts"], payload.get("model"))
    except ValueError as exc:
        return JSONResponse({"error": {"message": str(exc), "type": "invalid_request_error"}}, 400)
    return JSONResponse({"queued": queued, "pending": request.app.state.store.pending()})


async def clear_scripts(request: Request) -> Response:
    request.app.state.store.clear(request.query_params.get("model"))
    return JSONResponse({"pending": request.app.state.store.pending()})


async def journal(request: Request) -> Response:
    model = request.query_params.get("model")
    entries = [e for e in request.app.state.store.journal if model is None or e["model"] == model]
    return JSONResponse({"requests": entries})


async def reset(request: Request) -> Response:
    request.app.state.store.clear()
    request.app.state.store.journal.clear()
    request.app.state.store.limits.clear()
    return JSONResponse({"status": "ok"})


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok", "queued": request.app.state.store.pending()})


def create_app() -> Starlette:
    """Build the ASGI app with an empty ScriptStore at `app.state.store`."""
    from threadline.testing.model_server_anthropic import messages  # the second dialect (imports this module)
    from threadline.testing.model_server_audio import speech, transcriptions

    app = Starlette(routes=[
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/audio/speech", speech, methods=["POST"]),
        Route("/v1/audio/transcriptions", transcriptions, methods=["POST"]),
        Route("/_fake/script", add_scripts, methods=["POST"]),
        Route("/_fake/script", clear_scripts, methods=["DELETE"]),
        Route("/_fake/limit", set_limit, methods=["POST"]),
        Route("/_fake/requests", journal, methods=["GET"]),
        Route("/_fake/reset", reset, methods=["POST"]),
        Route("/_fake/health", health, methods=["GET"]),
        Route("/_fake/pairing", pairing.pairing_endpoint, methods=["GET", "POST"]),
    ])
    app.state.store = ScriptStore()
    app.state.pairing = pairing.PairingLog()
    app.state.stopping = lambda: False
    uv_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _QuietInjected) for f in uv_log.filters):
        uv_log.addFilter(_QuietInjected())
    return app


def _make_server(host: str, port: int, log_level: str = "warning") -> uvicorn.Server:
    app = create_app()
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False,
                            lifespan="off", ws="none", timeout_graceful_shutdown=1,
                            # longer than clients keep idle connections: a reused connection that
                            # the server closes at the same moment fails as "Connection error"
                            timeout_keep_alive=120)
    server = uvicorn.Server(config)
    app.state.stopping = lambda: server.should_exit
    return server


def _bound_port(server: uvicorn.Server) -> int:
    return server.servers[0].sockets[0].getsockname()[1]


@dataclass
class RunningServer:
    """A server started by start_in_thread(): `url` is http://host:port, `api_base` is url + /v1."""

    server: uvicorn.Server
    thread: threading.Thread
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def api_base(self) -> str:
        return self.url + "/v1"

    @property
    def store(self) -> ScriptStore:
        app: Any = self.server.config.app  # the Starlette app built by _make_server
        return app.state.store

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the server to exit (hung requests end within ~1 s) and wait for its thread."""
        self.server.should_exit = True
        self.thread.join(timeout)


def start_in_thread(host: str = "127.0.0.1", port: int = 0, timeout: float = 10.0) -> RunningServer:
    """Start a server on a daemon thread with its own event loop; port 0 picks a free port."""
    server = _make_server(host, port)
    thread = threading.Thread(target=server.run, name="fake-model-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the fake model server did not start")
        time.sleep(0.01)
    return RunningServer(server, thread, host, _bound_port(server))


async def serve(host: str, port: int, ready_file: str | None = None, log_level: str = "warning") -> None:
    """Run until SIGTERM/SIGINT; print the listening line (and write ready_file) once bound."""
    server = _make_server(host, port, log_level)
    task = asyncio.create_task(server.serve())
    while not server.started and not task.done():  # noqa: ASYNC110 - uvicorn sets a flag, it has no event to await
        await asyncio.sleep(0.01)
    if server.started:
        url = f"http://{host}:{_bound_port(server)}"
        print(f"model-server listening on {url}", flush=True)
        if ready_file:
            Path(ready_file).write_text(url + "\n")  # noqa: ASYNC240 - one short line, once, at startup
    await task


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Scriptable fake OpenAI chat-completions server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18080)
    parser.add_argument("--ready-file", help="write the base URL here once listening")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(serve(args.host, args.port, args.ready_file, args.log_level))


if __name__ == "__main__":
    main()
