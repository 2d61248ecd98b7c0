import orjson
import pytest

from threadline.errors import InvalidEventError, UnknownEventError
from threadline.events import SendMessage
from threadline.events.codec import decode, encode
from threadline.events.ingress import INGRESS_ADAPTER


def test_round_trip():
    req = SendMessage(agent_id="a", resource_id="r", thread_id="t", message="hi")
    value, headers = encode(req)
    assert dict(headers)["tl-type"] == b"send_message"
    back = decode(value, INGRESS_ADAPTER)
    assert back == req


@pytest.mark.parametrize("raw,code", [
    (b"not json", "invalid_json"),
    (b"[1,2]", "invalid_event"),
    (b'{"type": "nope", "agent_id": "a"}', "unknown_type"),
    (b'{"type": "send_message", "schema_version": 99}', "unsupported_version"),
    (b'{"type": "send_message", "agent_id": "a", "resource_id": "r"}', "validation_failed"),
    (b'{"type": "send_message", "agent_id": "a", "resource_id": "r", "thread_id": "t", "message": "x", '
     b'"reply_to": "bad topic!"}', "validation_failed"),
])
def test_bad_input_is_classified(raw, code):
    with pytest.raises(InvalidEventError) as info:
        decode(raw, INGRESS_ADAPTER)
    assert info.value.code == code


def test_unknown_type_is_unknown_event_error():
    with pytest.raises(UnknownEventError):
        decode(orjson.dumps({"type": "x"}), INGRESS_ADAPTER)


def test_a_terminated_backend_and_a_restarting_server_are_transient():
    import asyncpg

    from threadline.kafka.handling import is_transient

    assert is_transient(asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator command"))
    assert is_transient(asyncpg.exceptions.CannotConnectNowError("the database system is starting up"))
    assert not is_transient(asyncpg.exceptions.UniqueViolationError("duplicate key"))
