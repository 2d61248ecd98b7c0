"""A scriptable fake of the OpenAI chat-completions API, for tests, benchmarks and the demo.

Threadline reaches models only through litellm (`model="openai/<name>"`, `api_base=<url>/v1`);
this server stands in for the provider. Tests queue *scripts* that say what the next responses
are, including every failure shape litellm treats differently (docs/model-server.md).

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
  split                      "surrogates": every character above U+FFFF of the text, reasoning
                             and argument pieces is cut between its UTF-16 halves, each half
                             escaped in its own event; "bytes": the body is sent as UTF-8 (not
                             escaped), every write cut inside each multi-byte character
  times (default 1), model   repeat the script; match only requests for this model
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from threadline.testing import pairing
from threadline.testing.fake_replies import (
    _BATCH,
    _DONE,
    _REDACTED,
    DateHeader,
    InjectedDisconnect,
    ScriptStore,
    _completion,
    _error_body,
    _error_event,
    _pause,
    _plan,
    _QuietInjected,
    _sse_events,
    answer_headers,
    cut_utf8,
    json_object,
    rate_limited,
)
from threadline.testing.model_script import JournalEntry

log = logging.getLogger(__name__)

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


async def _cut_writes(body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``body`` with every write cut inside each multi-byte UTF-8 sequence (``split: "bytes"``),
    the cuts 5 ms apart so that each arrives in its own network read."""
    async for data in body:
        for i, cut in enumerate(cut_utf8(data)):
            if i:
                await asyncio.sleep(0.005)
            yield cut


def _closed(entry: JournalEntry, by: str) -> None:
    entry["closed_by"], entry["closed_at"] = by, time.time()


async def _journaled(body: AsyncIterator[bytes], entry: JournalEntry) -> AsyncIterator[bytes]:
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


async def chat_completions(request: Request) -> Response:
    """Answer one chat completion from the next matching script, or with the default echo."""
    app, store = request.app, request.app.state.store
    body = await json_object(request)
    if body is None:
        error = {"message": "The body must be a JSON object.", "type": "invalid_request_error"}
        return JSONResponse({"error": error}, 400)
    model = body["model"] if isinstance(body.get("model"), str) else None
    if (refused := _refused(request, body, model)) is not None:
        return refused
    script = store.take(model)
    headers = {k: ("<redacted>" if k in _REDACTED else v) for k, v in request.headers.items()}
    entry: JournalEntry = {"model": model, "path": request.url.path, "stream": bool(body.get("stream")),
             "scripted": script is not None, "headers": headers, "body": body, "time": time.time()}
    store.journal.append(entry)
    log.debug("chat completion model=%s stream=%s scripted=%s", model, bool(body.get("stream")), script is not None)
    script = script or {}
    out_headers = answer_headers(script.get("headers", {}), time.time())
    if script.get("delay") and not await _pause(app, script["delay"], request):
        _closed(entry, "client")
        return Response(status_code=499)
    if (answered := _scripted_answer(script, out_headers)) is not None:
        return answered
    return await _reply(request, body, model, script, entry, out_headers)


def _refused(request: Request, body: dict[str, Any], model: str | None) -> Response | None:
    """The 400 of a history with an unpaired tool call, or the 429 of a rate-limited model;
    ``None``: the request is answered."""
    if (unpaired := pairing.openai_pairing_error(body.get("messages"))) is not None:
        pairing.refuse(request, body, model, unpaired)
        return JSONResponse({"error": {"message": unpaired, "type": "invalid_request_error", "param": "messages",
                                       "code": None}}, 400)
    return rate_limited(request.app.state.store, model, request, body)


def _scripted_answer(script: dict[str, Any], out_headers: dict[str, str]) -> Response | None:
    """A script's raw body, or its error status (an ``error`` without a ``fail`` is a 500);
    ``None``: the script plans a reply."""
    if "raw" in script:
        media_type = script.get("content_type", "application/json")
        return Response(script["raw"], script.get("status", 200), out_headers, media_type)
    status = script.get("status", 500 if "error" in script and "fail" not in script else 200)
    if status >= 400:
        return JSONResponse(_error_body(status, script.get("error")), status, out_headers)
    return None


async def _reply(request: Request, body: dict[str, Any], model: str | None, script: dict[str, Any],
                 entry: JournalEntry, out_headers: dict[str, str]) -> Response:
    """The planned reply as an SSE stream or one JSON completion, with the script's faults."""
    app, status = request.app, script.get("status", 200)
    reply = _plan(script, body)
    if body.get("stream"):
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        split = script.get("split")
        events = _sse_events(reply, model or "fake-model", include_usage, script.get("usage_on_finish", False),
                             ascii_only=split != "bytes")
        sse = _stream(events, script, app)
        return StreamingResponse(_journaled(_cut_writes(sse) if split == "bytes" else sse, entry), status,
                                 {"cache-control": "no-cache", **out_headers}, media_type="text/event-stream")
    data = json.dumps(_completion(reply, model or "fake-model")).encode()
    if "fail" in script:
        return StreamingResponse(_faulty_body(data, script, app), status, out_headers, media_type="application/json")
    if script.get("ttft") and not await _pause(app, script["ttft"], request):
        return Response(status_code=499)
    return Response(data, status, out_headers, media_type="application/json")


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
    ], middleware=[Middleware(DateHeader)])
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
                            lifespan="off", ws="none", timeout_graceful_shutdown=1, date_header=False,
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
