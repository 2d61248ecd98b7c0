"""The Python client: publish requests to ingress, await replies, follow a thread's chunk topic;
``client.agent(id)`` gives Mastra's Agent methods on one agent."""

from threadline.client.agent_handle import AgentHandle
from threadline.client.client import SendResult, ThreadlineClient
from threadline.client.run_output import CreatedSignal, RunFailed, RunOutput
from threadline.client.subscription import ThreadSubscription

__all__ = ["AgentHandle", "CreatedSignal", "RunFailed", "RunOutput", "SendResult", "ThreadSubscription",
           "ThreadlineClient"]
