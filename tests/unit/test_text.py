"""Decision 18: U+0000 and lone surrogate halves (text PostgreSQL or UTF-8 cannot hold) become
U+FFFD wherever text enters; ids and keys of an ingress request holding them are refused."""

from __future__ import annotations

import json

import orjson
import pytest

from services.ingress.service import parse_request
from threadline.errors import InvalidEventError
from threadline.text import REPLACEMENT, clean_json, clean_text, find_bad_text, has_bad_text, loads_clean

LONE = "\ud800"  # a high half with no low half after it
PAIR = "\U0001f600"  # a valid pair: one code point in a Python str, kept


@pytest.mark.parametrize(("raw", "clean"), [
    ("plain", "plain"),
    ("a\x00b", f"a{REPLACEMENT}b"),
    (f"x{LONE}y", f"x{REPLACEMENT}y"),
    ("\udc80", REPLACEMENT),  # a lone low half
    (f"\x00{LONE}\udfff{PAIR}é", f"{REPLACEMENT * 3}{PAIR}é"),
    ("", ""),
])
def test_clean_text_replaces_nul_and_lone_halves_only(raw: str, clean: str) -> None:
    out = clean_text(raw)
    assert out == clean and len(out) == len(raw)
    assert has_bad_text(raw) == (raw != clean) and not has_bad_text(out)
    out.encode("utf-8")  # storable: encodes (a lone half would raise)


def test_clean_text_returns_good_text_itself() -> None:
    text = "nothing to replace: é " + PAIR
    assert clean_text(text) is text


def test_clean_json_cleans_every_string_keys_included_and_keeps_the_rest() -> None:
    value = {"a\x00": [1, 2.5, None, True, f"x{LONE}", {"deep": ("t\x00",)}], "ok": "fine"}
    out = clean_json(value)
    assert out == {f"a{REPLACEMENT}": [1, 2.5, None, True, f"x{REPLACEMENT}", {"deep": (f"t{REPLACEMENT}",)}],
                   "ok": "fine"}
    assert not find_bad_text(out) and find_bad_text(value)
    orjson.dumps(out)  # orjson refuses a lone half: the cleaned value encodes
    clean = {"a": [1, {"b": "c"}]}
    assert clean_json(clean) is clean  # nothing changed: no copy


def test_loads_clean_reads_what_orjson_refuses() -> None:
    # a lone surrogate escape: orjson refuses it, the standard parser keeps the half, then replaced
    assert loads_clean('{"q": "a\\ud800b", "n": "\\u0000"}') == {"q": f"a{REPLACEMENT}b", "n": REPLACEMENT}
    assert loads_clean(b'{"q": "\\udc00"}') == {"q": REPLACEMENT}
    assert loads_clean('{"pair": "\\ud83d\\ude00"}') == {"pair": PAIR}
    with pytest.raises(ValueError):
        loads_clean('{"q": ')
    with pytest.raises(ValueError):
        loads_clean(b'{"q": "\xff"}')  # bytes that are not UTF-8


def _body(**fields: object) -> bytes:
    base = {"type": "send_message", "event_id": "e1", "agent_id": "a", "resource_id": "r", "thread_id": "t",
            "message": "hi"}
    return json.dumps({**base, **fields}).encode()  # json escapes NUL and lone halves as \\u0000 / \\ud800


def test_ingress_content_is_cleaned() -> None:
    body = parse_request(_body(message={"contents": f"m\x00{LONE}", "metadata": {"k": "\x00"},
                                        "attributes": {"a": LONE}}))
    assert body["message"] == {"contents": f"m{REPLACEMENT}{REPLACEMENT}", "metadata": {"k": REPLACEMENT},
                               "attributes": {"a": REPLACEMENT}}
    sig = parse_request(_body(type="send_signal", signal={"type": "note", "contents": f"s{LONE}"}))
    assert sig["signal"]["contents"] == f"s{REPLACEMENT}"


@pytest.mark.parametrize("fields", [
    {"resource_id": "r\x00"}, {"thread_id": f"t{LONE}"}, {"event_id": "\x00"}, {"agent_id": LONE},
    {"reply_to": "x\x00"}, {"run_id": LONE}, {"state": {"id": "s\x00", "cacheKey": "k"}},
    {"notifications": [{"source": "s", "kind": "k", "summary": "ok", "dedupeKey": f"d{LONE}"}]},
])
def test_ingress_ids_and_keys_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(InvalidEventError) as info:
        parse_request(_body(**fields))
    assert info.value.code == "invalid_characters"


@pytest.mark.parametrize("value", [b'{"type": "send_message", "event_id": "e\xff1"}', b'{"event_id": "e1", ',
                                   b"\x00\x01 not json"])
def test_ingress_bytes_that_are_not_json_text_are_invalid_json(value: bytes) -> None:
    with pytest.raises(InvalidEventError) as info:
        parse_request(value)
    assert info.value.code == "invalid_json"
