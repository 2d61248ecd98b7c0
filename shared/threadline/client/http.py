"""The Python client over the HTTP gateway: :class:`ThreadlineClient` with an
:class:`~threadline.client.http_transport.HttpTransport`, given a URL and an API key (or a JWT)
only — no Kafka bootstrap, no PostgreSQL DSN (docs/gateway.md, "The Python client over HTTP")::

    async with ThreadlineClient.connect_http("https://threadline.example", api_key=KEY) as tl:
        sub = await tl.subscribe_to_thread("user-1", "thread-1")
        sent = await tl.send_message("hi", agent_id="support-agent", resource_id="user-1", thread_id="thread-1")
        accepted = await sent.accepted               # answered by the gateway's POST
        async for chunk in sub.stream: ...           # Server-Sent Events (httpx-sse)

Errors: an ingress error reply is :class:`RequestFailed` as over Kafka; 503 is
:class:`BrokerUnavailableError`; 504 is ``TimeoutError``; 401 / 403 / other refusals are
:class:`GatewayError`. A thread that does not exist and a thread of another resource look the
same (404): reads answer ``None`` / ``[]`` for both.
"""

from __future__ import annotations

import httpx

from threadline.client.client import ThreadlineClient
from threadline.client.gateway_http import GatewayError
from threadline.client.http_transport import HttpTransport
from threadline.client.results import BrokerUnavailableError, RequestFailed

__all__ = ["BrokerUnavailableError", "GatewayError", "HttpThreadlineClient", "RequestFailed"]


class HttpThreadlineClient(ThreadlineClient):
    """:class:`ThreadlineClient` over the gateway's HTTP API (a constructor, nothing more).

    Args:
        base_url: the gateway, e.g. ``http://127.0.0.1:18000``.
        api_key: an API key or a JWT, sent as ``Authorization: Bearer …`` (``None``: a gateway
            open for local development).
        default_agent: the agent of calls that name none.
        timeout_s: each HTTP call's timeout (``generate`` waits ``timeout_s`` more than its own).
        transport: an ``httpx`` transport (tests: ``httpx.MockTransport`` / ``ASGITransport``).
    """

    def __init__(self, base_url: str, *, api_key: str | None = None, default_agent: str | None = None,
                 timeout_s: float = 60.0, transport: httpx.AsyncBaseTransport | None = None) -> None:
        http = HttpTransport(base_url, api_key=api_key, timeout_s=timeout_s, transport=transport)
        super().__init__(transport=http, default_agent=default_agent)
        self.base_url = http.base_url
        self.timeout_s = timeout_s
