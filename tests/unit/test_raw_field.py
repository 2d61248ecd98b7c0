"""Bad input is answered (invariant 8) even when orjson cannot read it: a body that is JSON but
not valid UTF-8 text (a lone surrogate escape, bytes that are not UTF-8) used to get a dead letter
and no error reply, because the ids to answer with could not be read back."""

from __future__ import annotations

from types import SimpleNamespace

import orjson
import pytest

from threadline.kafka.handling import raw_field


def _record(value: bytes) -> SimpleNamespace:
    return SimpleNamespace(value=value, key=b"res-1:th-1", headers=[])


@pytest.mark.parametrize("body", [
    b'{"event_id": "req-1", "reply_to": "replies", "text": "half \\ud800 a pair"}',
    b'{"event_id": "req-1", "reply_to": "replies", "text": "latin-1 \xe9 byte"}',
])
def test_the_ids_of_a_body_orjson_refuses_are_still_read(body: bytes) -> None:
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(body)
    assert raw_field(_record(body), "event_id") == "req-1"
    assert raw_field(_record(body), "reply_to") == "replies"


def test_an_id_that_is_itself_not_utf8_is_made_encodable() -> None:
    value = raw_field(_record(b'{"event_id": "req-\\udc80"}'), "event_id")
    assert value == "req-?"
    value.encode("utf-8")


def test_not_json_at_all_gives_none() -> None:
    assert raw_field(_record(b"\x00\x01 not json"), "event_id") is None
    assert raw_field(_record(b'["a list"]'), "event_id") is None


def test_the_ids_of_json_cut_short_are_still_read() -> None:
    body = b'{"event_id": "req-2", "reply_to": "my-replies", "message": "cut sh'
    assert raw_field(_record(body), "event_id") == "req-2"
    assert raw_field(_record(body), "reply_to") == "my-replies"
    assert raw_field(_record(b'{"event_id": "esc\\"aped", "x": '), "event_id") is None  # no guessing at escapes
