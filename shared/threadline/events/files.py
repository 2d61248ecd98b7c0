"""File and image parts of messages and signals (docs/models.md, "Files and images").

A file part is stored as ``{type: "file", data, mimeType, filename?}``; ``data`` is an
``http(s)``/``gs`` URL, a ``data:`` URL, or base64. Mastra's image part
(``{type: "image", image, mediaType?}``) and AI SDK's ``mediaType`` are accepted and stored in
that shape. :func:`to_model_block` gives the OpenAI-style content block litellm translates into
each provider's shape (image blocks, documents, audio).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping

from threadline.errors import InvalidEventError
from threadline.events.json_types import JSONObject

_URL = re.compile(r"^(https?|gs)://\S+$", re.IGNORECASE)
_DATA_URL = re.compile(r"^data:([\w.+-]+/[\w.+-]+)?(;[\w=.+-]+)*;base64,(.*)$", re.IGNORECASE | re.DOTALL)
_MIME = re.compile(r"^[\w.+-]+/[\w.+*-]+$")
_AUDIO_FORMATS = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/mpeg": "mp3", "audio/mp3": "mp3"}


def _bad(why: str) -> InvalidEventError:
    return InvalidEventError(f"unreadable file part: {why}", code="invalid_parts")


def normalize_file_part(part: Mapping[str, object]) -> dict[str, str]:
    """Check a ``file`` or ``image`` part and return it as a stored file part.

    Raises:
        InvalidEventError: code ``invalid_parts`` — no data, data that is neither a URL, a
            ``data:`` URL nor valid base64, or a media type that is not ``type/subtype``.
    """
    data = part.get("image") if part.get("type") == "image" else part.get("data")
    mime = part.get("mimeType") or part.get("mediaType")
    if not isinstance(data, str) or not data.strip():
        raise _bad("'data' must be a non-empty string (a URL, a data: URL or base64)")
    data = data.strip()
    match = _DATA_URL.match(data)
    if match:
        mime = mime or match.group(1)
        _check_base64(match.group(3))
    elif not _URL.match(data):
        _check_base64(data)
    if mime is None and part.get("type") == "image":
        mime = "image/*"
    if not isinstance(mime, str) or not _MIME.match(mime):
        raise _bad("'mimeType' must be a media type such as image/png or application/pdf")
    out = {"type": "file", "data": data, "mimeType": mime}
    filename = part.get("filename")
    if isinstance(filename, str):
        out["filename"] = filename
    return out


def _check_base64(text: str) -> None:
    try:
        base64.b64decode(re.sub(r"\s+", "", text), validate=True)
    except (binascii.Error, ValueError):
        raise _bad("'data' is not a URL, a data: URL or valid base64") from None


def to_model_block(part: Mapping[str, str]) -> JSONObject:
    """The OpenAI-style content block of a stored file part (:func:`normalize_file_part`'s
    ``{type, data, mimeType, filename?}``, what litellm takes): ``image_url`` for images,
    ``input_audio`` for base64 WAV/MP3, ``file`` for the rest."""
    data, mime = part["data"], part.get("mimeType") or "application/octet-stream"
    is_url = bool(_URL.match(data))
    url = data if is_url or data.startswith("data:") else f"data:{mime};base64,{data}"
    if mime.startswith("image/"):
        return {"type": "image_url", "image_url": {"url": url}}
    if mime in _AUDIO_FORMATS and not is_url:
        raw = data.split("base64,", 1)[1] if data.startswith("data:") else data
        return {"type": "input_audio", "input_audio": {"data": raw, "format": _AUDIO_FORMATS[mime]}}
    if is_url:
        return {"type": "file", "file": {"file_id": url, "format": mime}}
    file: JSONObject = {"file_data": url}
    if part.get("filename"):
        file["filename"] = part["filename"]
    return {"type": "file", "file": file}
