"""The Python client: publish requests to ingress, await replies, follow a thread's chunk topic;
``client.agent(id)`` gives Mastra's Agent methods on one agent. ``ThreadlineClient.connect_http(url,
api_key=…)`` is the same API over the HTTP gateway (no Kafka, no PostgreSQL)."""

from threadline.client.agent_handle import AgentHandle
from threadline.client.client import SendResult, ThreadlineClient
from threadline.client.http import GatewayError, HttpThreadlineClient
from threadline.client.http_subscription import HttpThreadSubscription
from threadline.client.run_output import CreatedSignal, RunFailed, RunOutput
from threadline.client.subscription import ThreadSubscription

__all__ = ["AgentHandle", "CreatedSignal", "GatewayError", "HttpThreadSubscription", "HttpThreadlineClient",
            "RunFailed", "RunOutput", "SendResult", "ThreadSubscription",
           "ThreadlineClient"]
