"""Text that PostgreSQL or UTF-8 cannot hold, made storable (docs/decisions.md §18).

PostgreSQL ``text`` and ``jsonb`` refuse U+0000, and UTF-8 (so orjson, Kafka bodies, ``jsonb``)
cannot encode a lone surrogate half (U+D800–U+DFFF outside a valid pair, which Python strings
can hold after ``json.loads`` of an escape such as ``"\\ud800"``). Wherever text enters
Threadline — the model stream, tool results, signals, ingress requests — each such character is
replaced by U+FFFD (the replacement character), so one bad character never fails a run.

Pure functions, no I/O.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

REPLACEMENT = "\ufffd"
"""What replaces U+0000 and every lone surrogate half."""

# NUL, or any surrogate code point (a valid pair is one code point in a Python str, so any
# surrogate left in a str is a lone half)
_BAD = re.compile("[\x00\ud800-\udfff]")


def has_bad_text(value: str) -> bool:
    """Whether ``value`` holds U+0000 or a lone surrogate half."""
    return _BAD.search(value) is not None


def clean_text(value: str) -> str:
    """``value`` with U+0000 and every lone surrogate half replaced by U+FFFD (same length).

    A string without them is returned as is (no copy)."""
    if value.isascii():
        return value.replace("\x00", REPLACEMENT) if "\x00" in value else value
    return _BAD.sub(REPLACEMENT, value) if _BAD.search(value) else value


def clean_json(value: object) -> Any:
    """A JSON-like value (dicts, lists, tuples, strings, numbers, …) with :func:`clean_text`
    applied to every string in it, dict keys included. Containers are copied only when something
    in them changed; other values are returned as they are."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        changed = False
        out: dict[Any, Any] = {}
        for key, item in value.items():
            new_key = clean_text(key) if isinstance(key, str) else key
            new_item = clean_json(item)
            changed = changed or new_key is not key or new_item is not item
            out[new_key] = new_item
        return out if changed else value
    if isinstance(value, list | tuple):
        items = [clean_json(item) for item in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)
    return value


def find_bad_text(value: object) -> bool:
    """Whether any string in the JSON-like ``value`` (dict keys included) holds U+0000 or a lone
    surrogate half."""
    if isinstance(value, str):
        return has_bad_text(value)
    if isinstance(value, dict):
        return any(find_bad_text(k) or find_bad_text(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(find_bad_text(v) for v in value)
    return False


def loads_clean(data: str | bytes) -> Any:
    """Parse JSON text and clean every string in it (:func:`clean_json`).

    orjson refuses a lone surrogate escape (``"\\ud800"``); such text is parsed again with the
    standard library, which keeps the half, and the half is then replaced.

    Raises:
        ValueError: ``data`` is not JSON (``json.JSONDecodeError`` / ``orjson.JSONDecodeError``),
            or is bytes that are not UTF-8.
    """
    try:
        return clean_json(orjson.loads(data))
    except orjson.JSONDecodeError:
        text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
        return clean_json(json.loads(text))


class PieceJoiner:
    """Cleans text that arrives in pieces (a model stream's deltas) only once it is joined:
    a piece ending in the high half of a UTF-16 surrogate pair holds that half back until the next
    piece, so an emoji whose two halves came in two events (``"\\ud83d"``, then ``"\\ude00"``) is
    one character, not two U+FFFD (docs/decisions.md §181). What a half left alone, U+0000 and a
    lone low half become is :func:`clean_text`'s.
    """

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held = ""

    def push(self, piece: str) -> str:
        """The clean text ``piece`` completes (possibly ``""``: all of it is held back)."""
        if self._held:
            piece, self._held = self._held + piece, ""
        if piece and "\ud800" <= piece[-1] <= "\udbff":
            piece, self._held = piece[:-1], piece[-1]
        if piece.isascii():
            return clean_text(piece)
        if _BAD.search(piece):  # halves of a pair, side by side, become its one character
            piece = piece.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
        return clean_text(piece)

    def flush(self) -> str:
        """The half still held at the end of the text, as U+FFFD (``""``: none)."""
        held, self._held = self._held, ""
        return clean_text(held)
