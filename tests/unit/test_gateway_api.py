"""The gateway's auth decisions, event ids and OpenAPI document (pure logic; docs/gateway.md)."""

from __future__ import annotations

import time
from pathlib import Path

import jwt
import pytest

from threadline.config import Settings
from threadline.gateway import api
from threadline.gateway.app import HANDLERS
from threadline.gateway.auth import AuthConfig, AuthConfigError, authenticate, config_from_settings, credential, parse_api_keys
from threadline.gateway.streaming import Position, event_id, parse_event_id, start_id

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cret-" + "x" * 32


def _config(**kw) -> AuthConfig:
    return AuthConfig(keys=parse_api_keys('{"key-a": ["res-a"], "key-all": ["*"]}'), jwt_key=SECRET, **kw)


def test_api_keys_map_to_their_resources():
    cfg = _config()
    a = authenticate(cfg, "key-a")
    assert a is not None and a.via == "api_key"
    assert a.may_act_for("res-a") and not a.may_act_for("res-b") and not a.may_act_for("*x")
    assert authenticate(cfg, "key-all").may_act_for("anything")
    for bad in ("key-b", "key-", "key-a ", "", "KEY-A"):
        assert authenticate(cfg, bad) is None, bad
    assert authenticate(cfg, None) is None


def test_config_keys_are_stored_as_digests_only():
    cfg = _config()
    assert all(b"key-a" not in digest and len(digest) == 32 for digest, *_ in cfg.keys)
    assert "key-a" not in repr(cfg)


@pytest.mark.parametrize("raw", ["not json", "[1]", '{"k": "res"}', '{"": ["r"]}', '{"k": [1]}', '{"k": [""]}'])
def test_bad_key_settings_are_refused_without_quoting_a_key(raw):
    with pytest.raises(AuthConfigError) as info:
        parse_api_keys(raw)
    assert '"k"' not in str(info.value) and "'k'" not in str(info.value)


def test_jwts_are_verified_and_carry_the_resources():
    cfg = _config(jwt_audience="threadline")
    good = jwt.encode({"resources": ["res-a"], "exp": time.time() + 60, "aud": "threadline"}, SECRET, algorithm="HS256")
    caller = authenticate(cfg, good)
    assert caller is not None and caller.via == "jwt" and caller.may_act_for("res-a") and not caller.may_act_for("res-b")
    bad = [jwt.encode({"resources": ["res-a"], "exp": time.time() - 5, "aud": "threadline"}, SECRET, algorithm="HS256"),
           jwt.encode({"resources": ["res-a"], "exp": time.time() + 60, "aud": "threadline"}, "other" * 8, algorithm="HS256"),
           jwt.encode({"resources": ["res-a"], "exp": time.time() + 60, "aud": "elsewhere"}, SECRET, algorithm="HS256"),
           jwt.encode({"resources": ["res-a"], "aud": "threadline"}, SECRET, algorithm="HS256"),  # no exp
           jwt.encode({"resources": [7], "exp": time.time() + 60, "aud": "threadline"}, SECRET, algorithm="HS256"),
           jwt.encode({"exp": time.time() + 60, "aud": "threadline"}, SECRET, algorithm="HS256"),
           jwt.encode({"resources": ["res-a"], "exp": time.time() + 60, "aud": "threadline"}, None, algorithm="none")]
    for token in bad:
        assert authenticate(cfg, token) is None, jwt.decode(token, options={"verify_signature": False})


def test_open_mode_allows_everything_only_without_credentials_configured():
    assert authenticate(AuthConfig(open=True), None).may_act_for("x")
    assert authenticate(AuthConfig(), None) is None
    assert not AuthConfig().configured
    both = AuthConfig(keys=parse_api_keys('{"k": ["r"]}'), open=True)  # credentials configured: open is ignored
    assert authenticate(both, "wrong") is None and authenticate(both, None) is None
    assert authenticate(both, "k").resources == frozenset({"r"})


def test_settings_give_the_config():
    s = Settings(gateway_api_keys='{"k": ["r"]}', gateway_jwt_secret="j", gateway_jwt_audience="aud")
    cfg = config_from_settings(s)
    assert authenticate(cfg, "k").resources == frozenset({"r"}) and cfg.jwt_key == "j" and cfg.jwt_audience == "aud"
    assert "k" not in repr(s.gateway_api_keys) and '["r"]' not in str(s)


def test_credential_sources():
    assert credential({"authorization": "Bearer abc"}) == "abc"
    assert credential({"authorization": "bearer  abc "}) == "abc"
    assert credential({"x-api-key": "k"}) == "k"
    assert credential({"authorization": "Basic zzz"}) is None
    assert credential({}, {"access_token": "t"}) == "t"
    assert credential({}, None) is None


def test_event_ids_round_trip():
    chunk = {"runId": "run_1:x", "seq": 7, "type": "text-delta"}
    eid = event_id(42, chunk)
    assert parse_event_id(eid) == Position(42, 7, "run_1:x")
    assert parse_event_id(None) is None and parse_event_id(" ") is None
    for bad in ("x:1:r", "-1:2:r", "1.5", "-2"):
        with pytest.raises(ValueError):
            parse_event_id(bad)


def test_the_subscribed_event_id_resumes_where_its_stream_starts():
    """D01 (decision 214): a resume from the ``subscribed`` id sends every chunk from the stream's
    start offset on (the stream sends what lies after the id's offset); a resumed stream's
    ``subscribed`` id is its own resume point, so a second cut loses nothing and repeats nothing."""
    assert start_id(42, None) == "41" and parse_event_id("41") == Position(41)
    assert start_id(0, None) == "-1" and parse_event_id("-1") == Position(-1)  # before a topic's first chunk
    assert start_id(None, None) is None
    assert start_id(0, Position(17, 3, "run_1")) == "17"


def test_every_endpoint_has_a_handler_and_the_document_is_current():
    assert {ep.operation_id for ep in api.ENDPOINTS} == set(HANDLERS)
    assert (ROOT / "docs" / "openapi.json").read_bytes() == api.openapi_json(), \
        "docs/openapi.json is stale: python -m threadline.gateway.api > docs/openapi.json"
    doc = api.openapi()
    assert doc["paths"]["/v1/resources/{resource_id}/threads/{thread_id}/messages"]["post"]["requestBody"]
    assert "SendMessageBody" in doc["components"]["schemas"]
