"""The Python client over the HTTP gateway: :class:`HttpThreadlineClient` (defined beside
:class:`~threadline.client.ThreadlineClient`, whose ``connect_http`` returns it) is the client with an
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

from threadline.client.client import HttpThreadlineClient
from threadline.client.gateway_http import GatewayError
from threadline.client.results import BrokerUnavailableError, RequestFailed

__all__ = ["BrokerUnavailableError", "GatewayError", "HttpThreadlineClient", "RequestFailed"]
