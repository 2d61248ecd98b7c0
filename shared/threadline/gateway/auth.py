"""Who is calling the gateway and which resources it may act for (docs/gateway.md, "Auth").

A caller presents an API key (``Authorization: Bearer <key>`` or ``X-API-Key: <key>``) or a JWT
(``Authorization: Bearer <jwt>``: HS*, RS*, ES* or PS*, verified with a configured secret or
public key, or with an OIDC issuer's key set, :mod:`threadline.gateway.jwks`); the SSE endpoint
also takes ``?access_token=`` because a browser's ``EventSource`` cannot set headers. Keys are
compared in constant time, against every configured key (so the time does not tell which one
nearly matched). A caller is a :class:`Caller`: the resources it may act for, or every resource
(``*``). A refused caller's 401 says why (:func:`refusal`).

Nothing here logs or returns a key or a token.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

import jwt
import orjson
from starlette.datastructures import Headers, QueryParams
from starlette.types import ASGIApp, Receive, Scope, Send

from threadline.gateway.jwks import JwksKeys, token_kid

ANY = "*"
"""The resource list entry that allows every resource."""
EDITOR = "editor"
"""The scope that may read and save agents' editor overrides (decision 62)."""


class AuthConfigError(ValueError):
    """The gateway's auth settings cannot be used (``THREADLINE_GATEWAY_API_KEYS`` not a JSON map
    of key → list of resource ids)."""


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: ``resources`` it may act for (``*`` in it: all); ``via`` is
    ``api_key``, ``jwt`` or ``open`` (no auth configured, local development); ``scopes`` such as
    ``editor`` (decision 62; ``open`` has every scope)."""

    resources: frozenset[str]
    via: str
    scopes: frozenset[str] = frozenset()
    expires_at: float | None = None
    """When the credential expires (s since the epoch: a JWT's ``exp``; ``None``: an API key,
    which does not). A stream it opened ends then (decision 216)."""

    def has_scope(self, scope: str) -> bool:
        """True when the caller holds ``scope`` (``open``: always)."""
        return self.via == "open" or scope in self.scopes

    def may_act_for(self, resource_id: str) -> bool:
        """True when the caller may read and write ``resource_id``'s threads."""
        return ANY in self.resources or resource_id in self.resources


@dataclass(frozen=True)
class AuthConfig:
    """The parsed auth settings. ``keys`` holds SHA-256 digests of the API keys (never the keys),
    so that comparing is constant-time over equal-length values."""

    keys: tuple[tuple[bytes, frozenset[str], frozenset[str]], ...] = ()
    jwt_key: str | None = None
    jwt_algorithms: tuple[str, ...] = ("HS256",)
    jwt_audience: str | None = None
    jwt_claim: str = "resources"
    open: bool = False
    jwks: JwksKeys | None = None
    """An OIDC issuer's keys (``THREADLINE_GATEWAY_JWT_JWKS_URL``): a token whose ``kid`` names
    one of them is verified with it; other tokens with ``jwt_key``."""

    @property
    def configured(self) -> bool:
        return bool(self.keys) or self.verifies_jwts or self.open

    @property
    def verifies_jwts(self) -> bool:
        """True when a JWT can authenticate (a secret or public key, or a JWKS URL, is set)."""
        return self.jwt_key is not None or self.jwks is not None


ASYMMETRIC_DEFAULT = ("RS256", "ES256")
"""Algorithms a JWKS key verifies when ``jwt_algorithms`` names no asymmetric one (never HS*:
a public key must not be taken for an HMAC secret)."""


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


def _strings(value: object) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(r, str) and r for r in value)


def parse_api_keys(raw: str | None) -> tuple[tuple[bytes, frozenset[str], frozenset[str]], ...]:
    """``{"key": ["res-1", …]}`` or ``{"key": {"resources": [...], "scopes": ["editor"]}}`` (JSON)
    → ``((sha256(key), {res-1, …}, {scopes}), …)``.

    Raises:
        AuthConfigError: not a JSON object of non-empty string keys → lists of strings or
            ``{resources, scopes?}`` (the message never quotes a key).
    """
    if not raw:
        return ()
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise AuthConfigError("THREADLINE_GATEWAY_API_KEYS is not JSON") from None
    if not isinstance(data, dict):
        raise AuthConfigError("THREADLINE_GATEWAY_API_KEYS must be a JSON object: key -> [resource ids]")
    out = []
    for i, (key, entry) in enumerate(data.items()):
        resources, scopes = (entry.get("resources"), entry.get("scopes", [])) if isinstance(entry, dict) \
            else (entry, [])
        if not key or not _strings(resources) or not _strings(scopes) or \
                (isinstance(entry, dict) and set(entry) - {"resources", "scopes"}):
            raise AuthConfigError(f"THREADLINE_GATEWAY_API_KEYS entry #{i + 1} must map a non-empty key to a "
                                  "list of resource ids, or to {resources: [...], scopes: [...]}")
        out.append((_digest(key), frozenset(resources), frozenset(scopes)))
    return tuple(out)


def config_from_settings(settings: Any) -> AuthConfig:
    """The :class:`AuthConfig` of :class:`threadline.config.Settings` (its ``gateway_*`` fields).
    Raises :class:`AuthConfigError` for unusable API keys."""
    keys = settings.gateway_api_keys.get_secret_value() if settings.gateway_api_keys is not None else None
    secret = settings.gateway_jwt_secret.get_secret_value() if settings.gateway_jwt_secret is not None else None
    jwks_url = settings.gateway_jwt_jwks_url
    return AuthConfig(keys=parse_api_keys(keys), jwt_key=secret or None,
                      jwt_algorithms=tuple(settings.gateway_jwt_algorithms), jwt_audience=settings.gateway_jwt_audience,
                      jwt_claim=settings.gateway_jwt_resources_claim, open=settings.gateway_open,
                      jwks=JwksKeys(jwks_url) if jwks_url else None)


def credential(headers: Mapping[str, str], query: Mapping[str, str] | None = None) -> str | None:
    """The presented secret: ``Authorization: Bearer …``, else ``X-API-Key``, else (SSE only)
    the ``access_token`` query parameter; ``None`` when there is none."""
    auth = headers.get("authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    if headers.get("x-api-key"):
        return headers["x-api-key"].strip()
    if query is not None and query.get("access_token"):
        return query["access_token"]
    return None


def _match_key(config: AuthConfig, secret: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """The resources and scopes of the API key ``secret``; every configured key is compared (constant time)."""
    presented = _digest(secret)
    found: tuple[frozenset[str], frozenset[str]] | None = None
    for digest, resources, scopes in config.keys:
        if hmac.compare_digest(digest, presented):
            found = (resources, scopes)
    return found


def _jwt_scopes(claims: Mapping[str, object]) -> frozenset[str]:
    """``scopes`` (a list) or OAuth's ``scope`` (space-separated) of a token's claims."""
    scopes = claims.get("scopes", claims.get("scope", []))
    if isinstance(scopes, str):
        scopes = scopes.split()
    return frozenset(s for s in scopes if isinstance(s, str)) if isinstance(scopes, list) else frozenset()


def _verification_key(config: AuthConfig, token: str) -> tuple[Any, list[str]] | str:
    """The key and algorithms that verify ``token``, or why there is none."""
    kid = token_kid(token)
    if config.jwks is not None and kid is not None:
        found = config.jwks.key(kid)
        if found is not None:
            allowed = [a for a in config.jwt_algorithms if not a.startswith("HS")] or list(ASYMMETRIC_DEFAULT)
            return found.key, allowed
        if config.jwt_key is None:
            return f"the token's key id (kid) {kid!r} is not in the issuer's key set"
    if config.jwt_key is None:
        return "the token names no key id (kid), and only a JWKS URL is configured"
    return config.jwt_key, list(config.jwt_algorithms)


def _verify_jwt(config: AuthConfig, token: str) -> tuple[frozenset[str], frozenset[str], float] | str:
    """The resources, scopes and expiry (``exp``, s since the epoch) of a valid ``token``, else the
    reason it is refused (never quoting the token)."""
    if not config.verifies_jwts or token.count(".") != 2:
        return "not a known API key"
    key = _verification_key(config, token)
    if isinstance(key, str):
        return key
    try:
        claims = jwt.decode(token, key[0], algorithms=key[1], audience=config.jwt_audience,
                            options={"require": ["exp"], "verify_aud": config.jwt_audience is not None})
    except jwt.InvalidSignatureError:
        return "the token's signature does not verify with the configured key"
    except jwt.ExpiredSignatureError:
        return "the token has expired"
    except jwt.InvalidAlgorithmError:
        return f"the token's algorithm is not one of {', '.join(key[1])}"
    except jwt.PyJWTError as exc:
        return f"the token is not valid: {exc}"
    resources = claims.get(config.jwt_claim)
    if isinstance(resources, str):
        resources = [resources]
    if not _strings(resources):
        return f"the token's {config.jwt_claim!r} claim is not a list of resource ids"
    return frozenset(resources), _jwt_scopes(claims), float(claims["exp"])


def refusal(config: AuthConfig, secret: str | None) -> str:
    """Why ``secret`` does not authenticate, for the 401 body (quotes neither key nor token)."""
    if secret is None:
        return "a valid API key or token is required"
    found = _verify_jwt(config, secret)
    return found if isinstance(found, str) else "a valid API key or token is required"


def authenticate(config: AuthConfig, secret: str | None) -> Caller | None:
    """The caller presenting ``secret`` (an API key or a JWT); ``None`` when it is not valid
    (missing, unknown, expired, badly signed, without the resources claim). ``open`` with no key
    and no JWT secret configured allows every resource; with either configured it is ignored."""
    open_only = config.open and not config.keys and not config.verifies_jwts  # open counts only alone
    if secret is None:
        return Caller(frozenset({ANY}), "open") if open_only else None
    found = _match_key(config, secret)
    if found is not None:
        return Caller(found[0], "api_key", found[1])
    verified = _verify_jwt(config, secret)
    if not isinstance(verified, str):
        return Caller(verified[0], "jwt", verified[1], expires_at=verified[2])
    return Caller(frozenset({ANY}), "open") if open_only else None


class PrepareJwks:
    """ASGI middleware: before a request is handled, fetch the issuer's key set when its bearer
    token needs it (:meth:`threadline.gateway.jwks.JwksKeys.prepare`), so authentication reads a cache."""

    def __init__(self, app: ASGIApp, jwks: JwksKeys | None) -> None:
        self.app = app
        self.jwks = jwks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.jwks is not None and scope["type"] == "http":
            secret = credential(Headers(scope=scope), QueryParams(scope.get("query_string", b"")))
            if secret is not None:
                await self.jwks.prepare(secret)
        await self.app(scope, receive, send)
