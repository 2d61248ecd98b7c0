"""D03 (cases-3), the pure parts (decision 213): what a gateway does with a request under a kept
``Idempotency-Key``, the request's fingerprint and the key's form, the ids a request takes under
:func:`threadline.client.sending.request_id`, and the HTTP client's retries of one logical write
under one key."""

from __future__ import annotations

import httpx
import pytest

from threadline.client import gateway_http
from threadline.client.http import HttpThreadlineClient
from threadline.client.results import BrokerUnavailableError
from threadline.client.sending import identified, request_id, with_signal
from threadline.events import SendMessage
from threadline.gateway.idempotency import KeyRefused, check_key, decide, fingerprint, keeps
from threadline.store.idempotency import KeyRow

pytestmark = pytest.mark.unit
FP = fingerprint("POST", "/v1/resources/r/threads/t/messages", b'{"message": "hi", "agent_id": "a"}')


@pytest.mark.parametrize(("row", "presented", "decision"), [
    (KeyRow(FP, "req-1", None, None, claimed=True), FP, "send"),
    (KeyRow(FP, "req-1", None, None, claimed=False), FP, "resend"),  # the first is under way, or lost its answer
    (KeyRow(FP, "req-1", 202, {"action": "wake"}, claimed=False), FP, "replay"),
    (KeyRow(FP, "req-1", 202, {"action": "wake"}, claimed=False), "other", "conflict"),
    (KeyRow(FP, "req-1", None, None, claimed=False), "other", "conflict"),
])
def test_a_kept_key_decides_the_request(row, presented, decision):
    assert decide(row, presented) == decision


def test_the_fingerprint_is_of_method_path_and_json_body():
    assert fingerprint("POST", "/v1/resources/r/threads/t/messages", b'{"agent_id":"a","message":"hi"}') == FP
    assert fingerprint("POST", "/v1/resources/r/threads/t/messages", b'{"message": "hi!", "agent_id": "a"}') != FP
    assert fingerprint("POST", "/v1/resources/r/threads/t2/messages", b'{"message": "hi", "agent_id": "a"}') != FP
    assert fingerprint("POST", "/p", b"not json") != fingerprint("POST", "/p", b"not json!")


def test_a_key_is_visible_ascii_of_at_most_255_characters():
    assert check_key(" k-1 ") == "k-1"
    for bad in ("", "   ", "x" * 256, "a b", "cl\u00e9"):
        with pytest.raises(KeyRefused) as refused:
            check_key(bad)
        assert (refused.value.status, refused.value.code) == (422, "invalid_idempotency_key")


def test_only_a_success_is_kept():
    assert keeps(200) and keeps(202)
    assert not keeps(422) and not keeps(503) and not keeps(504)


def test_a_request_sent_under_an_id_takes_it_and_its_signal_id():
    req = SendMessage(agent_id="a", resource_id="r", thread_id="t", message="hi")
    assert identified(req) is req  # no id set: unchanged
    with request_id("0193abc"):
        sent, signal = with_signal(req)
    assert (sent.event_id, sent.signal_id, signal.id) == ("0193abc", "sig_0193abc", "sig_0193abc")
    assert with_signal(req)[0].event_id == req.event_id  # outside: its own


async def test_the_http_client_retries_one_write_under_one_key(monkeypatch):
    monkeypatch.setattr(gateway_http, "RETRY_DELAYS_S", (0.0, 0.0, 0.0))
    seen: list[httpx.Request] = []
    answers = [httpx.ConnectError("lost"), httpx.Response(502), httpx.Response(503, json={"error": {
        "code": "broker_unavailable", "message": "m"}}),
        httpx.Response(202, json={"type": "accepted", "request_id": "x", "action": "wake", "run_id": "run_1"})]

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    tl = HttpThreadlineClient("http://gw", transport=httpx.MockTransport(handler))
    sent = await tl.send_message("hi", agent_id="a", resource_id="r", thread_id="t")
    assert (await sent.accepted).run_id == "run_1"
    keys = {r.headers["Idempotency-Key"] for r in seen}
    assert len(seen) == 4 and len(keys) == 1 and keys != {""}

    seen.clear()
    answers[:] = [httpx.ConnectError("lost")] * 4  # a gateway that stays away: the error after 3 retries
    with pytest.raises(BrokerUnavailableError):
        await tl.send_message("hi", agent_id="a", resource_id="r", thread_id="t")
    assert len(seen) == 4
    assert seen[0].headers["Idempotency-Key"] not in keys  # another logical call: another key
