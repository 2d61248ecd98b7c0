"""The Python client: ``ThreadlineClient`` publishes requests to ingress, awaits replies, follows a
thread's chunks and reads the read model, over a transport (:mod:`threadline.client.transport`):
Kafka by default, the HTTP gateway (``ThreadlineClient.connect_http(url, api_key=…)``: no Kafka,
no PostgreSQL), or :class:`MemoryTransport` in process for unit tests. ``client.agent(id)`` gives
Mastra's Agent methods on one agent."""

from threadline.client.agent_handle import AgentHandle
from threadline.client.client import SendResult, ThreadlineClient
from threadline.client.gateway_http import GatewayError, GatewayReader
from threadline.client.http import HttpThreadlineClient
from threadline.client.http_subscription import HttpThreadSubscription
from threadline.client.http_transport import HttpTransport
from threadline.client.kafka_transport import KafkaTransport
from threadline.client.memory_transport import MemorySubscription, MemoryTransport
from threadline.client.postgres_reader import PostgresReader
from threadline.client.run_output import CreatedSignal, RunFailed, RunOutput
from threadline.client.subscription import ThreadSubscription
from threadline.client.transport import Reader, Subscription, Transport

__all__ = ["AgentHandle", "CreatedSignal", "GatewayError", "GatewayReader", "HttpThreadSubscription",
           "HttpThreadlineClient", "HttpTransport", "KafkaTransport", "MemorySubscription", "MemoryTransport",
           "PostgresReader", "Reader", "RunFailed", "RunOutput", "SendResult", "Subscription", "ThreadSubscription",
           "ThreadlineClient", "Transport"]
