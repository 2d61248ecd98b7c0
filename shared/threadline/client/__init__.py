"""The Python client: publish requests to ingress, await replies, follow a thread's chunk topic."""

from threadline.client.client import SendResult, ThreadlineClient
from threadline.client.subscription import ThreadSubscription

__all__ = ["SendResult", "ThreadSubscription", "ThreadlineClient"]
