"""Agents of the B-series cases on duplicates and outages (B13, B15, B16, B17): plain echo
agents with their own fake model names, and B17's notification policy."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from threadline.runtime import Agent

B17_WINDOW_S = 1.0
"""B17's digest window: a ``coalesce_key`` group of medium records goes out together after it."""


def _b17_policy(record: Any, thread_state: str, now: datetime) -> Any:
    """Medium records on an idle thread wait out the window, so a ``coalesce_key`` group sent in one
    request goes out as one delivery (a scheduler's); anything else: the default policy."""
    if record.priority == "medium" and thread_state == "idle":
        return {"action": "defer", "deliver_at": now + timedelta(seconds=B17_WINDOW_S), "reason": "digest-window"}
    return None


b13 = Agent(id="B13", model="openai/threadline-b13")
b15 = Agent(id="B15", model="openai/threadline-b15")
b16 = Agent(id="B16", model="openai/threadline-b16")
b17 = Agent(id="B17", model="openai/threadline-b17",
            notifications={"digest_window_s": B17_WINDOW_S, "delivery_policy": {"decide": _b17_policy}})

agents = [b13, b15, b16, b17]
