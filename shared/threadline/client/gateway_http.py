"""The gateway's HTTP API from the client's side: one call with the gateway's errors mapped to
the client's (:class:`GatewayHttp`), and the read model over it (:class:`GatewayReader`).

Errors: an ingress error reply is :class:`~threadline.client.results.RequestFailed` (as over
Kafka); 503 is :class:`~threadline.client.results.BrokerUnavailableError`; 504 is
``TimeoutError``; 401 / 403 / other refusals are :class:`GatewayError`. A thread that does not
exist and a thread of another resource look the same (404): reads answer ``None`` / ``[]``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx

from threadline.client.results import BrokerUnavailableError, RequestFailed
from threadline.client.transport import ReadName, query_of
from threadline.errors import ThreadlineError
from threadline.events.replies import ErrorReply
from threadline.events.rows import AgentDetails, InboxRecord, MessageRow, RunRow, ScoreRow, ThreadDetails, ThreadSummary

RETRY_DELAYS_S = (0.5, 1.0, 2.0)
"""The waits (s) before the retries of a write that names an ``Idempotency-Key``: three retries
after a lost connection, a 502 or a 503 (decision 213)."""
RETRIED_STATUSES = frozenset({502, 503})
"""Answers a keyed write is sent again after: the gateway (or a proxy before it) did not take it."""

INGRESS_REFUSALS_ARE_NOT = frozenset({"validation_failed", "invalid_json", "invalid_argument"})
"""422 codes of the gateway itself (a body it refused), not of ingress."""


class GatewayError(ThreadlineError):
    """The gateway refused a request: ``status`` (401, 403, 404, 422…), ``code`` and ``message``
    of its ``{"error": {code, message}}`` body."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code


def seg(value: str) -> str:
    """``value`` as one URL path segment."""
    return quote(value, safe="")


def thread_path(resource_id: str, thread_id: str) -> str:
    """``/v1/resources/{resource_id}/threads/{thread_id}``, each id one segment."""
    return f"/v1/resources/{seg(resource_id)}/threads/{seg(thread_id)}"


class GatewayHttp:
    """One ``httpx.AsyncClient`` on the gateway.

    Args:
        base_url: the gateway, e.g. ``http://127.0.0.1:18000``.
        api_key: an API key or a JWT, sent as ``Authorization: Bearer …`` (``None``: a gateway
            open for local development).
        timeout_s: each call's timeout (seconds).
        transport: an ``httpx`` transport (tests: ``httpx.MockTransport`` / ``ASGITransport``).
    """

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout_s: float = 60.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.AsyncClient(base_url=self.base_url, headers=headers, transport=transport,
                                      timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)))

    async def healthz(self) -> None:
        """Raises :class:`BrokerUnavailableError` when the gateway does not answer ``/healthz``."""
        try:
            (await self.http.get("/healthz")).raise_for_status()
        except httpx.HTTPError as exc:
            raise BrokerUnavailableError(f"cannot reach the gateway at {self.base_url}: {type(exc).__name__}") from exc

    async def close(self) -> None:
        """Close the connections (idempotent)."""
        await self.http.aclose()

    async def call(self, method: str, path: str, body: Mapping[str, object] | None = None, *,
                   params: dict[str, str] | None = None, timeout_s: float | None = None,
                   missing_ok: bool = False, idempotency_key: str | None = None) -> Any:
        """The JSON answer of one call; ``None`` for a 404 when ``missing_ok``. A call with an
        ``idempotency_key`` sends it as ``Idempotency-Key`` and is sent again with it after a lost
        connection, a 502 or a 503, after each wait of :data:`RETRY_DELAYS_S` (the gateway then
        answers the first request's answer, decision 213).

        Raises:
            RequestFailed: ingress refused the request (422 with an ingress error code).
            BrokerUnavailableError: the gateway cannot reach Kafka (503), or the gateway is unreachable.
            TimeoutError: no answer in time (504, or the call's own timeout).
            GatewayError: any other refusal.
        """
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        delays = RETRY_DELAYS_S if idempotency_key else ()
        for attempt in range(len(delays) + 1):
            last = attempt == len(delays)
            try:
                resp = await self.http.request(method, path, json=body, params=params, headers=headers,
                                               timeout=timeout_s if timeout_s is not None else httpx.USE_CLIENT_DEFAULT)
            except httpx.TimeoutException as exc:
                raise TimeoutError(f"{method} {path}: no answer from the gateway in time") from exc
            except httpx.TransportError as exc:
                if last:
                    raise BrokerUnavailableError(
                        f"cannot reach the gateway at {self.base_url}: {type(exc).__name__}") from exc
                await asyncio.sleep(delays[attempt])
                continue
            if resp.status_code in RETRIED_STATUSES and not last:
                await asyncio.sleep(delays[attempt])
                continue
            if resp.status_code < 400:
                return resp.json()
            if resp.status_code == 404 and missing_ok:
                return None
            raise _refusal(resp)
        raise AssertionError("unreachable: the last attempt returns or raises")


def _refusal(resp: httpx.Response) -> Exception:
    """The client's error for a refused call (status 400 or over)."""
    try:
        err = resp.json()["error"]
        code, message = str(err["code"]), str(err["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "http_error", resp.text[:200]
    if resp.status_code == 503:
        return BrokerUnavailableError(f"gateway: {message}")
    if resp.status_code == 504:
        return TimeoutError(f"gateway: {message}")
    if resp.status_code == 422 and code not in INGRESS_REFUSALS_ARE_NOT:
        return RequestFailed(ErrorReply(request_id="-", code=code, message=message))
    return GatewayError(resp.status_code, code, message)


class GatewayReader:
    """The read model over the gateway's ``GET`` endpoints (and the inbox's mark ``POST``).

    Raises (every read): as :meth:`GatewayHttp.call`; ``scores`` raises :class:`GatewayError`
    (501): the gateway serves no scores.
    """

    def __init__(self, http: GatewayHttp, *, owned: bool = False) -> None:
        self._http = http
        self._owned = owned

    @classmethod
    def connect(cls, base_url: str, *, api_key: str | None = None, timeout_s: float = 60.0) -> GatewayReader:
        """A reader with its own connections to the gateway at ``base_url`` (closed by :meth:`close`)."""
        return cls(GatewayHttp(base_url, api_key=api_key, timeout_s=timeout_s), owned=True)

    async def close(self) -> None:
        """Close the connections when this reader made them."""
        if self._owned:
            await self._http.close()

    async def read(self, name: ReadName, /, **params: object) -> Any:
        """The answer of read ``name`` (:data:`~threadline.client.transport.ReadName`).

        Raises:
            ValueError: an unknown read, or ``mark`` with a status other than seen / dismissed / archived.
        """
        return await query_of(self, name)(**params)

    async def _get(self, path: str, key: str | None = None, params: dict[str, str] | None = None) -> Any:
        answer = await self._http.call("GET", path, params=params, missing_ok=True)
        if key is None:
            return answer
        return [] if answer is None else list(answer[key])

    async def _active_run(self, *, resource_id: str, thread_id: str) -> str | None:
        answer = await self._get(f"{thread_path(resource_id, thread_id)}/active-run")
        return None if answer is None else answer.get("run_id")

    async def _agent(self, *, agent_id: str) -> AgentDetails | None:
        found: AgentDetails | None = await self._get(f"/v1/agents/{seg(agent_id)}")
        return found

    async def _thread(self, *, resource_id: str, thread_id: str) -> ThreadDetails | None:
        found: ThreadDetails | None = await self._get(thread_path(resource_id, thread_id))
        return found

    async def _threads(self, *, resource_id: str, limit: int = 100) -> list[ThreadSummary[str]]:
        answer = await self._http.call("GET", f"/v1/resources/{seg(resource_id)}/threads",
                                       params={"limit": str(limit)})
        return list(answer["threads"])

    async def _walk(self, path: str, key: str, params: dict[str, str] | None = None) -> list[Any]:
        """Every row of a paged list read (decision 221): pages of 1,000 followed by their
        ``next_cursor`` (a gateway that answers no cursor answered every row at once). A page
        whose connection drops before its answer is asked for once more (a read repeats safely:
        a kept-alive connection the gateway closed at the moment it was reused, say)."""
        out: list[Any] = []
        query = {**(params or {}), "limit": "1000"}
        while True:
            try:
                answer = await self._http.call("GET", path, params=query, missing_ok=True)
            except BrokerUnavailableError:
                answer = await self._http.call("GET", path, params=query, missing_ok=True)
            if answer is None:
                return out
            out += answer[key]
            if not answer.get("next_cursor"):
                return out
            query["cursor"] = answer["next_cursor"]

    async def _messages(self, *, resource_id: str, thread_id: str) -> list[MessageRow[str]]:
        rows: list[MessageRow[str]] = await self._walk(f"{thread_path(resource_id, thread_id)}/messages", "messages")
        return rows

    async def _runs(self, *, resource_id: str, thread_id: str) -> list[RunRow[str]]:
        rows: list[RunRow[str]] = await self._walk(f"{thread_path(resource_id, thread_id)}/runs", "runs")
        return rows

    async def _scores(self, *, run_id: str) -> list[ScoreRow]:
        raise GatewayError(501, "not_served", f"the gateway serves no scores (run {run_id}); read them from PostgreSQL")

    async def _inbox(self, *, resource_id: str, thread_id: str, status: str | None = None) -> list[InboxRecord]:
        rows: list[InboxRecord] = await self._walk(f"{thread_path(resource_id, thread_id)}/inbox", "records",
                                                      {"status": status} if status else None)
        return rows

    async def _notification(self, *, resource_id: str, thread_id: str, record_id: str) -> InboxRecord | None:
        found: InboxRecord | None = await self._get(f"{thread_path(resource_id, thread_id)}/inbox/{seg(record_id)}")
        return found

    async def _mark(self, *, resource_id: str, thread_id: str, record_id: str, status: str) -> InboxRecord | None:
        if status not in ("seen", "dismissed", "archived"):
            raise ValueError(f"status must be seen, dismissed or archived, not {status!r}")
        found: InboxRecord | None = await self._http.call(
            "POST", f"{thread_path(resource_id, thread_id)}/inbox/{seg(record_id)}", {"status": status},
            missing_ok=True)
        return found
