"""The fake model server's audio endpoints (OpenAI's speech and transcription APIs), for an agent's
``voice`` (docs/agents.md):

  POST /v1/audio/speech          {model, input, voice, response_format?} -> a WAV file whose
                                 ``tlxt`` chunk holds the input text (and 0.1 s of silence)
  POST /v1/audio/transcriptions  multipart ``file`` + ``model`` -> ``{"text": ...}``: the ``tlxt``
                                 text of a WAV this server made, else the script's ``text``, else ""

Both take the head of the model's script queue as the chat endpoint does (a script with
``status`` >= 400 answers that error) and are journaled (``body`` without the audio bytes;
transcriptions add ``file_bytes``).
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Mapping
from email.parser import BytesParser
from email.policy import default as default_policy
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

RATE = 16_000
"""Samples per second of the WAV files made here (16-bit mono)."""


def fake_wav(text: str) -> bytes:
    """A small valid WAV file carrying ``text`` (UTF-8) in a ``tlxt`` chunk."""
    fmt = struct.pack("<HHIIHH", 1, 1, RATE, RATE * 2, 2, 16)
    payload = text.encode()
    if len(payload) % 2:
        payload += b"\x00"
    silence = b"\x00\x00" * (RATE // 10)
    chunks = (b"fmt " + struct.pack("<I", len(fmt)) + fmt
              + b"tlxt" + struct.pack("<I", len(text.encode())) + payload
              + b"data" + struct.pack("<I", len(silence)) + silence)
    return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WAVE" + chunks


def wav_text(data: bytes) -> str | None:
    """The ``tlxt`` text of a WAV made by :func:`fake_wav`, else ``None``."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    pos = 12
    while pos + 8 <= len(data):
        kind, size = data[pos:pos + 4], struct.unpack("<I", data[pos + 4:pos + 8])[0]
        if kind == b"tlxt":
            return data[pos + 8:pos + 8 + size].decode(errors="replace")
        pos += 8 + size + (size % 2)
    return None


def _form(content_type: str, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    """A multipart/form-data body as ``{field: (filename, bytes)}``."""
    msg = BytesParser(policy=default_policy).parsebytes(
        f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode() + body)
    out: dict[str, tuple[str | None, bytes]] = {}
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if name:
            out[str(name)] = (part.get_filename(), payload if isinstance(payload, bytes) else b"")
    return out


def _journal(request: Request, model: str | None, script: Mapping[str, object] | None, body: Mapping[str, object]) -> None:
    request.app.state.store.journal.append({"model": model, "path": request.url.path, "stream": False,
                                            "scripted": script is not None, "headers": {}, "body": body,
                                            "time": time.time()})


def _error(script: dict[str, Any]) -> Response | None:
    status = int(script.get("status", 200))
    if status < 400:
        return None
    return JSONResponse({"error": script.get("error") or {"message": f"scripted {status}", "type": "server_error"}},
                        status)


async def speech(request: Request) -> Response:
    """Text to speech: a WAV carrying the text."""
    try:
        body = json.loads(await request.body())
    except ValueError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("input"), str):
        return JSONResponse({"error": {"message": "input (a string) is required", "type": "invalid_request_error"}},
                            400)
    model = body.get("model") if isinstance(body.get("model"), str) else None
    script = request.app.state.store.take(model)
    _journal(request, model, script, body)
    failed = _error(script or {})
    if failed is not None:
        return failed
    return Response(fake_wav(body["input"]), 200, media_type="audio/wav")


async def transcriptions(request: Request) -> Response:
    """Speech to text: the text a fake WAV carries, or the script's."""
    form = _form(request.headers.get("content-type", ""), await request.body())
    model = form.get("model", (None, b""))[1].decode() or None
    filename, audio = form.get("file", (None, b""))
    script = request.app.state.store.take(model)
    _journal(request, model, script, {"model": model, "filename": filename, "file_bytes": len(audio),
                                      **{k: v[1].decode(errors="replace") for k, v in form.items()
                                         if k not in ("file", "model")}})
    failed = _error(script or {})
    if failed is not None:
        return failed
    if not audio:
        return JSONResponse({"error": {"message": "file is required", "type": "invalid_request_error"}}, 400)
    text = (script or {}).get("text")
    return JSONResponse({"text": text if isinstance(text, str) else (wav_text(audio) or "")})
