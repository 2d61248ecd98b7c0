"""Threadline: Mastra's agent model as event-driven services over Kafka and PostgreSQL.

What agents and clients are written with, importable from here::

    from threadline import Agent, Processor, ThreadlineClient, create_tool

Names are imported on first use (``import threadline`` stays cheap for the services and the
CLI); ``__all__`` lists them all, sorted, and ``tests/unit/test_public_api.py`` fails when it
drifts. Everything else (``threadline.events``, ``threadline.kafka``, ``threadline.store``,
``threadline.testing``, …) is importable by its module path, but is the runtime's own.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from threadline.client import SendResult, ThreadlineClient, ThreadSubscription
    from threadline.client.client import RequestFailed
    from threadline.config import Settings, get_settings
    from threadline.errors import (
        ConfigurationError,
        InvalidEventError,
        ModelCallError,
        NotConnectedError,
        RunError,
        StaleWriterError,
        ThreadlineError,
        UnknownEventError,
    )
    from threadline.flows.inbox_tool import inbox_tool
    from threadline.runtime import (
        Agent,
        MessageList,
        Processor,
        Tool,
        ToolContext,
        ToolHooks,
        TripWire,
        create_tool,
        make_message,
        text_of,
        tool,
    )

__version__ = "0.1.0"

_WHERE = {
    # writing agents
    "Agent": "threadline.runtime",
    "MessageList": "threadline.runtime",
    "Processor": "threadline.runtime",
    "Tool": "threadline.runtime",
    "ToolContext": "threadline.runtime",
    "ToolHooks": "threadline.runtime",
    "TripWire": "threadline.runtime",
    "create_tool": "threadline.runtime",
    "inbox_tool": "threadline.flows.inbox_tool",
    "make_message": "threadline.runtime",
    "text_of": "threadline.runtime",
    "tool": "threadline.runtime",
    # talking to a cluster
    "RequestFailed": "threadline.client.client",
    "SendResult": "threadline.client",
    "Settings": "threadline.config",
    "ThreadSubscription": "threadline.client",
    "ThreadlineClient": "threadline.client",
    "get_settings": "threadline.config",
    # errors (threadline.errors)
    "ConfigurationError": "threadline.errors",
    "InvalidEventError": "threadline.errors",
    "ModelCallError": "threadline.errors",
    "NotConnectedError": "threadline.errors",
    "RunError": "threadline.errors",
    "StaleWriterError": "threadline.errors",
    "ThreadlineError": "threadline.errors",
    "UnknownEventError": "threadline.errors",
}

__all__ = [
    "Agent",
    "ConfigurationError",
    "InvalidEventError",
    "MessageList",
    "ModelCallError",
    "NotConnectedError",
    "Processor",
    "RequestFailed",
    "RunError",
    "SendResult",
    "Settings",
    "StaleWriterError",
    "ThreadSubscription",
    "ThreadlineClient",
    "ThreadlineError",
    "Tool",
    "ToolContext",
    "ToolHooks",
    "TripWire",
    "UnknownEventError",
    "create_tool",
    "get_settings",
    "inbox_tool",
    "make_message",
    "text_of",
    "tool",
]


def __getattr__(name: str) -> object:
    """Import a public name on first use. Raises ``AttributeError`` for any other name."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'threadline' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
