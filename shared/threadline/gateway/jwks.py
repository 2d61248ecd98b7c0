"""The signing keys of an OIDC issuer, fetched from its JWKS URL and cached (docs/gateway.md, "Auth").

``THREADLINE_GATEWAY_JWT_JWKS_URL`` names a JSON Web Key Set (RFC 7517), e.g. an issuer's
``https://issuer.example/.well-known/jwks.json``. A token's header ``kid`` picks its key. The set is
fetched when the gateway first sees a token, again when a token names a ``kid`` the cached set
lacks (the issuer rotated its keys) but at most once per :data:`MIN_REFETCH_S`, so tokens with
made-up ``kid`` values cannot make the gateway hammer the issuer, and again after
:data:`MAX_AGE_S`. Fetching is the only I/O: it happens in :meth:`JwksKeys.prepare`, awaited by the
app's middleware before a handler runs; :meth:`JwksKeys.key` only reads the cache, so
authentication itself stays synchronous and pure.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx
import jwt

from threadline.logging import get_logger

log = get_logger(__name__)

MIN_REFETCH_S = 30.0
"""Least time between two fetches of the key set (an unknown ``kid`` waits for the next one)."""
MAX_AGE_S = 300.0
"""A fetched key set is fetched again after this long (keys an issuer retired stop verifying)."""
FETCH_TIMEOUT_S = 5.0
"""Bound of one fetch; a failed fetch keeps the keys held so far."""


def token_kid(token: str) -> str | None:
    """The ``kid`` of a JWT's header; ``None`` for a token without one or not a JWT."""
    if token.count(".") != 2:
        return None
    try:
        kid = jwt.get_unverified_header(token).get("kid")
    except jwt.PyJWTError:
        return None
    return kid if isinstance(kid, str) and kid else None


def parse_key_set(data: object) -> dict[str, jwt.PyJWK]:
    """``{"keys": [JWK, …]}`` → ``{kid: key}``; keys without a ``kid``, of a kind PyJWT cannot
    use, or meant for encryption (``use: enc``) are left out."""
    out: dict[str, jwt.PyJWK] = {}
    keys = data.get("keys") if isinstance(data, dict) else None
    for entry in keys if isinstance(keys, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("kid"), str) or entry.get("use", "sig") != "sig":
            continue
        try:
            out[entry["kid"]] = jwt.PyJWK.from_dict(entry)
        except jwt.PyJWTError:
            continue
    return out


Fetch = Callable[[str], Awaitable[object]]
"""Fetches a URL's JSON body (an exception when it cannot)."""


async def http_get_json(url: str) -> object:
    """GET ``url`` and decode its JSON. Raises :class:`httpx.HTTPError` or :class:`ValueError`."""
    async with httpx.AsyncClient(timeout=FETCH_TIMEOUT_S) as client:
        response = await client.get(url, headers={"accept": "application/json"})
        response.raise_for_status()
        return response.json()


class JwksKeys:
    """The cached key set of ``url``; ``clock`` is monotonic seconds (a parameter for tests)."""

    def __init__(self, url: str, *, fetch: Fetch = http_get_json, clock: Callable[[], float] = time.monotonic) -> None:
        self.url = url
        self._fetch = fetch
        self._clock = clock
        self._keys: MutableMapping[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None

    def _due(self, kid: str | None) -> bool:
        if self._fetched_at is None:
            return True
        age = self._clock() - self._fetched_at
        return age >= MAX_AGE_S or (kid is not None and kid not in self._keys and age >= MIN_REFETCH_S)

    async def prepare(self, token: str) -> None:
        """Fetch the key set when ``token`` needs it (see the module's docstring); never raises:
        a failed fetch is logged and the keys held so far stay."""
        kid = token_kid(token)
        if token.count(".") != 2 or not self._due(kid):
            return
        self._fetched_at = self._clock()
        try:
            keys = parse_key_set(await self._fetch(self.url))
        except Exception as exc:  # noqa: BLE001 - any failure of the issuer leaves the cache as it was
            log.warning("jwks fetch failed", url=self.url, error=type(exc).__name__)
            return
        self._keys = keys
        log.info("jwks fetched", url=self.url, keys=len(keys))

    def key(self, kid: str | None) -> jwt.PyJWK | None:
        """The cached key named ``kid`` (``None``: unknown or no ``kid``)."""
        return self._keys.get(kid) if kid is not None else None

    def holds(self) -> dict[str, Any]:
        """What the cache holds, for logs and tests: ``{"kids": [...], "fetched": bool}``."""
        return {"kids": sorted(self._keys), "fetched": self._fetched_at is not None}
