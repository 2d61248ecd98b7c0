"""The fake model server's second dialect: Anthropic's Messages API (``POST /v1/messages``), so that
litellm's translation for ``anthropic/<name>`` models is exercised end to end: the request the
provider would receive (system blocks with ``cache_control``, ``thinking``, image blocks, tool
schemas) is journaled as it arrived, and the reply is Anthropic's event stream.

The scripts are those of :mod:`threadline.testing.model_server` (one queue per model name):
``text``/``chunks``, ``reasoning`` (a thinking block), ``tool_calls``, ``finish_reason``
(``stop`` → ``end_turn``, ``tool_calls`` → ``tool_use``, ``length`` → ``max_tokens``), ``usage``,
``status``/``error``/``headers``, ``delay``/``ttft``/``chunk_delay``, ``fail: error_event | disconnect`` (+ ``fail_after``),
``times``. Not supported here: ``raw``, ``truncate``, ``malformed``, ``stall``.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from threadline.testing import fake_replies as base
from threadline.testing import pairing

if TYPE_CHECKING:
    from threadline.events.json_types import JSONObject, JSONValue

_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "content_filter": "refusal"}
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error"}


def _error(status: int, error: Mapping[str, object] | None) -> dict[str, Any]:
    error = dict(error or {})
    message = error.get("message") or base._DEFAULT_ERRORS.get(status, (f"Error {status}.",))[0]
    kind = error.get("type") or _ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _event(name: str, data: Mapping[str, object]) -> str:
    return f"event: {name}\ndata: {base._dumps({'type': name, **data})}\n\n"


def _usage(reply: Any) -> tuple[int, int, int]:
    usage = reply.usage or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    # OpenAI's prompt_tokens include cached reads; Anthropic's input_tokens do not
    return int(usage.get("prompt_tokens") or 0) - int(cached), int(usage.get("completion_tokens") or 0), int(cached)


def _events(reply: base._Reply, model: str) -> list[str]:
    """The reply as Anthropic's stream: message_start, one block per text / tool call, message_delta."""
    inp, out, cached = _usage(reply)
    events = [_event("message_start", {"message": {
        "id": "msg_" + secrets.token_hex(12), "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": inp, "output_tokens": 1, "cache_read_input_tokens": cached}}})]
    index = 0
    if reply.reasoning:
        events.append(_event("content_block_start", {"index": index,
                                                     "content_block": {"type": "thinking", "thinking": ""}}))
        events += [_event("content_block_delta", {"index": index, "delta": {"type": "thinking_delta", "thinking": p}})
                   for p in reply.reasoning]
        events.append(_event("content_block_delta", {"index": index, "delta": {
            "type": "signature_delta", "signature": "fake-signature-" + secrets.token_hex(4)}}))
        events.append(_event("content_block_stop", {"index": index}))
        index += 1
    if reply.pieces:
        events.append(_event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}}))
        events += [_event("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": p}})
                   for p in reply.pieces]
        events.append(_event("content_block_stop", {"index": index}))
        index += 1
    for call in reply.calls:
        block = {"type": "tool_use", "id": call["id"].replace("call_", "toolu_"), "name": call["name"], "input": {}}
        events.append(_event("content_block_start", {"index": index, "content_block": block}))
        events += [_event("content_block_delta", {"index": index,
                                                  "delta": {"type": "input_json_delta", "partial_json": f}})
                   for f in call["fragments"]]
        events.append(_event("content_block_stop", {"index": index}))
        index += 1
    stop = _STOP.get(reply.finish_reason, reply.finish_reason)
    events.append(_event("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None},
                                           "usage": {"output_tokens": out}}))
    events.append(_event("message_stop", {}))
    return events


def _message(reply: base._Reply, model: str) -> JSONObject:
    content: list[JSONValue] = []
    if reply.pieces:
        content.append({"type": "text", "text": "".join(reply.pieces)})
    for call in reply.calls:
        content.append({"type": "tool_use", "id": call["id"].replace("call_", "toolu_"), "name": call["name"],
                        "input": json.loads(call["arguments"] or "{}")})
    inp, out, cached = _usage(reply)
    return {"id": "msg_" + secrets.token_hex(12), "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": _STOP.get(reply.finish_reason, reply.finish_reason),
            "stop_sequence": None,
            "usage": {"input_tokens": inp, "output_tokens": out, "cache_read_input_tokens": cached}}


async def _stream(events: list[str], script: dict[str, Any], request: Request) -> AsyncIterator[bytes]:
    app = request.app
    fail = script.get("fail")
    fail_at = min(script.get("fail_after", 0), len(events) - 1) if fail else -1
    if script.get("ttft") and not await base._pause(app, script["ttft"]):
        return
    for i, event in enumerate(events):
        if i == fail_at:
            if fail == "disconnect":
                raise base.InjectedDisconnect("scripted disconnect")
            body = script.get("error_event") or _error(529, script.get("error") or
                                                       {"message": "Overloaded", "type": "overloaded_error"})
            yield f"event: error\ndata: {base._dumps(body)}\n\n".encode()
            return
        if script.get("chunk_delay") and i and not await base._pause(app, script["chunk_delay"]):
            return
        yield event.encode()


def _as_openai(body: dict[str, Any]) -> dict[str, Any]:
    """The fields :func:`fake_replies._plan` reads (the last user text for the default echo)."""
    messages = [{"role": m.get("role"), "content": m.get("content")}
                for m in body.get("messages") or [] if isinstance(m, dict)]
    return {"messages": messages}


async def messages(request: Request) -> Response:
    """Answer one Messages API request from the next matching script, or with the default echo."""
    app, store = request.app, request.app.state.store
    body = await base.json_object(request)
    if body is None:
        return JSONResponse(_error(400, {"message": "The body must be a JSON object."}), 400)
    model = body["model"] if isinstance(body.get("model"), str) else None
    if (unpaired := pairing.anthropic_pairing_error(body.get("messages"))) is not None:
        pairing.refuse(request, body, model, unpaired)
        return JSONResponse(_error(400, {"message": unpaired}), 400)
    limited = base.rate_limited(store, model, request, body)
    if limited is not None:
        return limited
    script = store.take(model)
    headers = {k: ("<redacted>" if k in base._REDACTED else v) for k, v in request.headers.items()}
    store.journal.append({"model": model, "path": request.url.path, "stream": bool(body.get("stream")),
                          "scripted": script is not None, "headers": headers, "body": body, "time": time.time()})
    script = script or {}
    out_headers = base.answer_headers(script.get("headers", {}), time.time())
    if script.get("delay") and not await base._pause(app, script["delay"], request):
        return Response(status_code=499)
    status = script.get("status", 500 if "error" in script and "fail" not in script else 200)
    if status >= 400:
        return JSONResponse(_error(status, script.get("error")), status, out_headers)
    reply = base._plan(script, _as_openai(body))
    if body.get("stream"):
        return StreamingResponse(_stream(_events(reply, model or "fake-model"), script, request), status,
                                 {"cache-control": "no-cache", **out_headers}, media_type="text/event-stream")
    return JSONResponse(_message(reply, model or "fake-model"), status, out_headers)
