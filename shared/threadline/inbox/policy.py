"""Delivery policy (Mastra's Agent API ``sendNotificationSignal`` and ``notifications.deliveryPolicy``).

The default (docs/notifications.md, "The default policy"):

| priority | thread active | thread idle |
|---|---|---|
| urgent | deliver | deliver |
| high | a summary now, the full notification when the thread goes idle | deliver |
| medium | batched into a summary | deliver |
| low | batched into a summary | batched into a summary that reaches subscribers but does not wake the model |

An agent's ``notifications={"delivery_policy": {...}}`` may set ``default``, ``priorities``,
``sources`` and ``decide(record, thread_state, now)``; the first that answers wins, in the order
``decide`` → ``sources`` → ``priorities`` → ``default`` → the table above. ``digest_window_s``
in the policy overrides the cluster's ``THREADLINE_DIGEST_WINDOW_S`` for that agent.

Threadline decision (adapting Mastra vector N7): low-priority records and digests never enter an
active run; a low digest due while the thread is active waits for idle and then reaches
subscribers only (see ``threadline.flows.inbox.dispatch_due``).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any, Literal

from tenacity import wait_exponential

from threadline._internal.usercode import call_user
from threadline.errors import ConfigurationError

Action = Literal["deliver", "summarize", "defer", "persist", "discard", "queue", "hold"]
ACTIONS = ("deliver", "summarize", "defer", "persist", "discard", "queue", "hold")
PRIORITY_RANK = {"urgent": 0, "high": 1, "medium": 2, "low": 3}
MAX_DELIVERY_ATTEMPTS = 5
"""After this many failed deliveries a record is ``failed`` (Mastra ``MAX_NOTIFICATION_DELIVERY_ATTEMPTS``)."""
_BACKOFF = wait_exponential(multiplier=5, max=300)


def retry_delay_s(attempts: int) -> float:
    """Seconds before the next delivery attempt after ``attempts`` failures: 5, 10, 20, 40 … ≤ 300."""
    return float(_BACKOFF(SimpleNamespace(attempt_number=max(1, attempts))))  # type: ignore[arg-type]  # tenacity's wait reads only attempt_number


@dataclass(slots=True)
class Decision:
    """What to do with one record now."""

    action: Action
    reason: str | None
    """Why (the built-in table's reasons: ``urgent``, ``idle-high``, …); a policy's decision has
    the reason it gave, or none (as Mastra's ``NotificationDeliveryDecision.reason?``)."""
    deliver_at: datetime | None = None
    summary_at: datetime | None = None

    def dump(self) -> dict[str, str]:
        """``{action, reason?, deliverAt?, summaryAt?}`` (times as ISO 8601)."""
        out: dict[str, str] = {"action": self.action}
        if self.reason is not None:
            out["reason"] = self.reason
        if self.deliver_at:
            out["deliverAt"] = self.deliver_at.isoformat()
        if self.summary_at:
            out["summaryAt"] = self.summary_at.isoformat()
        return out


def default_decision(priority: str, active: bool, now: datetime, *, digest_window_s: float = 0.0) -> Decision:
    """The built-in table."""
    later = now + timedelta(seconds=digest_window_s)
    if priority == "urgent":
        return Decision("deliver", "urgent")
    if priority == "high":
        return Decision("summarize", "active-high-summary-then-full", summary_at=now, deliver_at=now) if active \
            else Decision("deliver", "idle-high")
    if priority == "medium":
        return Decision("summarize", "active-batch-summary", summary_at=later) if active \
            else Decision("deliver", "idle-medium")
    return Decision("summarize", "active-batch-summary" if active else "idle-low-summary", summary_at=later)


def _coerce(value: object) -> Decision | None:
    if value is None:
        return None
    if isinstance(value, Decision):
        return value
    if isinstance(value, str):
        value = {"action": value}
    if not isinstance(value, dict) or value.get("action") not in ACTIONS:
        raise ConfigurationError(f"a delivery policy returned {value!r}; expected one of {ACTIONS}")
    return Decision(value["action"], value.get("reason"),
                    deliver_at=value.get("deliver_at") or value.get("deliverAt"),
                    summary_at=value.get("summary_at") or value.get("summaryAt"))


async def decide(policy: dict[str, Any] | None, record: dict[str, Any], *, active: bool, now: datetime,
                 digest_window_s: float = 0.0) -> Decision:
    """Resolve the decision for ``record`` (a dict with ``priority``, ``source``, …).

    Raises:
        ConfigurationError: the policy answered something that is not a decision.
    """
    policy = policy or {}
    digest_window_s = float(policy.get("digest_window_s", digest_window_s))
    fn = policy.get("decide")
    if callable(fn):
        from threadline._internal.attrdict import wrap

        params = inspect.signature(fn).parameters
        kwargs = {k: v for k, v in {"record": wrap(dict(record)), "thread_state": "active" if active else "idle",
                                    "now": now}.items() if k in params or any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())}
        out = await call_user(fn, **kwargs)  # a plain function runs off the event loop
        found = _coerce(out)
        if found:
            return _fill(found, record, active, now, digest_window_s)
    for table, key in (("sources", record.get("source")), ("priorities", record.get("priority"))):
        found = _coerce((policy.get(table) or {}).get(key))
        if found:
            return _fill(found, record, active, now, digest_window_s)
    found = _coerce(policy.get("default"))
    if found:
        return _fill(found, record, active, now, digest_window_s)
    return default_decision(record.get("priority", "medium"), active, now, digest_window_s=digest_window_s)


def _fill(d: Decision, record: Mapping[str, object], active: bool, now: datetime, window: float) -> Decision:
    if d.action == "summarize" and d.summary_at is None:
        d.summary_at = now + timedelta(seconds=window)
    if d.action == "defer" and d.deliver_at is None:
        d.deliver_at = now
    return d
