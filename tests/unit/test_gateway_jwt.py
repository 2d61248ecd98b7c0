"""JWTs signed with public-key algorithms (RS256, ES256) and an OIDC issuer's JWKS (docs/gateway.md, "Auth")."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from starlette.testclient import TestClient

from threadline.client.client import BrokerUnavailableError
from threadline.config import Settings
from threadline.gateway import mastra_api
from threadline.gateway.app import Gateway, make_app
from threadline.gateway.auth import AuthConfig, authenticate, config_from_settings, refusal
from threadline.gateway.jwks import MIN_REFETCH_S, JwksKeys, parse_key_set
from threadline.store import queries

RSA = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC = ec.generate_private_key(ec.SECP256R1())
OTHER_RSA = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem(private: Any) -> str:
    return private.public_key().public_bytes(serialization.Encoding.PEM,
                                             serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def _jwk(private: Any, kid: str, alg: str) -> dict[str, Any]:
    algo = jwt.algorithms.RSAAlgorithm if alg.startswith("RS") else jwt.algorithms.ECAlgorithm
    return {**json.loads(algo.to_jwk(private.public_key())), "kid": kid, "alg": alg, "use": "sig"}


def _token(private: Any, alg: str, kid: str | None = None, **claims: Any) -> str:
    body = {"resources": ["user-1"], "exp": time.time() + 60, **claims}
    return jwt.encode(body, private, algorithm=alg, headers={"kid": kid} if kid else None)


@pytest.mark.parametrize(("private", "alg"), [(RSA, "RS256"), (EC, "ES256")])
def test_a_public_key_token_authenticates_with_the_pem_key(private: Any, alg: str) -> None:
    cfg = AuthConfig(jwt_key=_pem(private), jwt_algorithms=(alg,))
    caller = authenticate(cfg, _token(private, alg))
    assert caller is not None and caller.via == "jwt" and caller.may_act_for("user-1")
    forged = _token(OTHER_RSA, "RS256") if alg == "RS256" else _token(ec.generate_private_key(ec.SECP256R1()), alg)
    assert authenticate(cfg, forged) is None
    assert refusal(cfg, forged) == "the token's signature does not verify with the configured key"


def test_refusals_say_why_without_quoting_the_token() -> None:
    cfg = AuthConfig(jwt_key=_pem(RSA), jwt_algorithms=("RS256",))
    expired = _token(RSA, "RS256", exp=time.time() - 5)
    assert refusal(cfg, expired) == "the token has expired"
    assert refusal(cfg, _token(RSA, "RS256", resources=7)) == "the token's 'resources' claim is not a list of resource ids"
    assert refusal(cfg, jwt.encode({"exp": time.time() + 60}, "k" * 32, algorithm="HS256")) == \
        "the token's algorithm is not one of RS256"
    assert refusal(cfg, None) == "a valid API key or token is required"
    assert refusal(AuthConfig(), "some-key") == "not a known API key"


class _Issuer:
    """A JWKS endpoint on a local port: ``keys`` is what it serves; ``hits`` counts the fetches."""

    def __init__(self) -> None:
        self.keys: list[dict[str, Any]] = [_jwk(RSA, "rsa-1", "RS256"), _jwk(EC, "ec-1", "ES256")]
        self.hits = 0
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                issuer.hits += 1
                body = json.dumps({"keys": issuer.keys}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/.well-known/jwks.json"


@pytest.fixture
def issuer() -> Iterator[_Issuer]:
    served = _Issuer()
    thread = threading.Thread(target=served.server.serve_forever, daemon=True)
    thread.start()
    yield served
    served.server.shutdown()
    served.server.server_close()


class _Unreachable:
    """A client whose broker is away: an authenticated send is a 503, an unauthenticated one a 401."""

    async def send_message(self, *_: Any, **__: Any) -> Any:
        raise BrokerUnavailableError("not acknowledged in time")


def _app(monkeypatch: pytest.MonkeyPatch, auth: AuthConfig) -> TestClient:
    async def thread_owner(_: Any, thread_id: str) -> str | None:
        return None

    monkeypatch.setattr(queries, "thread_owner", thread_owner)
    gateway = Gateway(_Unreachable(), None, auth)  # type: ignore[arg-type]  # a send reads no pool here
    return TestClient(make_app(gateway, extra_routes=mastra_api.ROUTES))


def test_a_jwks_url_verifies_tokens_by_kid_over_http(monkeypatch: pytest.MonkeyPatch, issuer: _Issuer) -> None:
    cfg = config_from_settings(Settings(gateway_jwt_jwks_url=issuer.url, gateway_jwt_algorithms=["RS256", "ES256"]))
    assert cfg.configured and cfg.jwks is not None and cfg.jwt_key is None
    http = _app(monkeypatch, cfg)

    def send(token: str, resource: str = "user-1") -> Any:
        return http.post(f"/v1/resources/{resource}/threads/t-1/messages", json={"message": "hi", "agent_id": "helper"},
                         headers={"Authorization": f"Bearer {token}"})

    for private, alg, kid in ((RSA, "RS256", "rsa-1"), (EC, "ES256", "ec-1")):
        r = send(_token(private, alg, kid))
        assert r.status_code == 503, r.text  # authenticated: it got as far as Kafka
    assert issuer.hits == 1  # one fetch, cached for both tokens
    wrong = send(_token(OTHER_RSA, "RS256", "rsa-1"))
    assert wrong.status_code == 401
    assert wrong.json() == {"error": {"code": "unauthenticated",
                                      "message": "the token's signature does not verify with the configured key"}}
    unknown = send(_token(RSA, "RS256", "nope"))
    assert unknown.status_code == 401 and "'nope' is not in the issuer's key set" in unknown.text
    assert issuer.hits == 1  # an unknown kid within MIN_REFETCH_S does not refetch
    assert send(_token(RSA, "RS256", "rsa-1"), "user-2").status_code == 403  # the token's resources decide


def test_an_unknown_kid_refetches_after_the_bound_and_hs_never_passes(issuer: _Issuer) -> None:
    now = [1000.0]
    keys = JwksKeys(issuer.url, clock=lambda: now[0])
    cfg = AuthConfig(jwks=keys, jwt_algorithms=("HS256", "RS256"))
    rotated = _token(OTHER_RSA, "RS256", "rsa-2")
    asyncio.run(keys.prepare(rotated))
    assert authenticate(cfg, rotated) is None and issuer.hits == 1
    issuer.keys.append(_jwk(OTHER_RSA, "rsa-2", "RS256"))  # the issuer rotates in a new key
    now[0] += MIN_REFETCH_S - 1
    asyncio.run(keys.prepare(rotated))
    assert issuer.hits == 1
    now[0] += 1
    asyncio.run(keys.prepare(rotated))
    assert issuer.hits == 2 and authenticate(cfg, rotated) is not None
    # an HMAC token signed with the public key's text is refused: JWKS keys never verify HS*
    confused = jwt.encode({"resources": ["*"], "exp": time.time() + 60}, "x" * 32, algorithm="HS256",
                          headers={"kid": "rsa-1"})
    assert authenticate(cfg, confused) is None


def test_a_failed_fetch_keeps_the_keys_and_the_set_parser_skips_unusable_keys() -> None:
    async def down(_: str) -> object:
        raise OSError("connection refused")

    keys = JwksKeys("http://issuer.invalid/jwks", fetch=down)
    asyncio.run(keys.prepare(_token(RSA, "RS256", "rsa-1")))
    assert keys.holds() == {"kids": [], "fetched": True}
    parsed = parse_key_set({"keys": [_jwk(RSA, "a", "RS256"), {"kty": "RSA"}, {**_jwk(EC, "b", "ES256"), "use": "enc"},
                                     {"kid": "c", "kty": "nope"}, "x"]})
    assert list(parsed) == ["a"]
    assert parse_key_set("not a set") == {}
