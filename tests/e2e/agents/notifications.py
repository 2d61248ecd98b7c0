"""Agents of the notification tests: the default delivery policy, custom policies (by priority,
by source, a ``decide`` function with every action), a digest window, and the inbox tool."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from threadline.flows.inbox_tool import inbox_tool
from threadline.runtime import Agent


def _summarize_low_priority(record: Any, **_: Any) -> dict[str, Any] | None:
    """Low priority: a summary in 30 minutes; anything else: the default policy."""
    if record.priority == "low":
        return {"action": "summarize", "summary_at": datetime.now(UTC) + timedelta(minutes=30)}
    return None


def _decide_by_kind(record: Any, thread_state: str, now: datetime) -> Any:
    """Every custom action, chosen by the notification's ``kind``."""
    if record.kind == "hold-me":  # held while the thread is busy, decided again once it is idle
        return "hold" if thread_state == "active" else {"action": "deliver", "reason": "released-on-idle"}
    if record.kind == "queue-me":
        return "queue"
    if record.kind == "persist-me":
        return "persist"
    if record.kind.startswith("later"):  # timed: an hour from now (tests move the scheduler's clock)
        if record.priority == "low":
            return {"action": "summarize", "summary_at": now + timedelta(hours=1)}
        return {"action": "defer", "deliver_at": now + timedelta(hours=1), "reason": "later"}
    return None


notes = Agent(id="notes", model="openai/threadline-notes")
notes_custom = Agent(id="notes-custom", model="openai/threadline-notes",
                     notifications={"delivery_policy": {"priorities": {"urgent": "deliver"},
                                                        "decide": _summarize_low_priority,
                                                        "sources": {"spam": "discard"}}})
notes_actions = Agent(id="notes-actions", model="openai/threadline-actions",
                      notifications={"delivery_policy": {"decide": _decide_by_kind}})
notes_sources = Agent(id="notes-sources", model="openai/threadline-actions",
                      notifications={"delivery_policy": {"decide": lambda **_: None, "sources": {"github": "discard"},
                                                         "priorities": {"urgent": "persist"}}})
notes_digest = Agent(id="notes-digest", model="openai/threadline-notes-digest",
                     notifications={"digest_window_s": 1.0})
inbox_agent = Agent(id="inbox-agent", model="openai/threadline-inbox", tools=[inbox_tool()])

agents = [notes, notes_custom, notes_actions, notes_sources, notes_digest, inbox_agent]
