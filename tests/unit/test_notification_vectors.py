"""Notification vectors that are pure logic (docs/cases.md): N8 (decision order), N13
(digest rendering), N15 (built-in attributes win); the default policy table; retry backoff.
The others run on the real cluster: tests/e2e/test_notifications.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from threadline.inbox.policy import decide, default_decision, retry_delay_s
from threadline.inbox.render import combined_notification_signal, digest_signal, notification_signal
from threadline.runtime.signals import render_markup

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _rec(**kw):
    base = {"id": "ntf_1", "source": "github", "kind": "ci-status", "priority": "medium", "summary": "s",
            "attributes": {}, "metadata": {}, "coalesced_count": 1}
    return {**base, **kw}


def _markup(signal):
    return render_markup(signal.get("tag_name") or "notification", signal["attributes"], signal["contents"])


async def test_n8_sources_beat_priorities_when_decide_answers_nothing():
    policy = {"decide": lambda **_: None, "sources": {"github": "discard"}, "priorities": {"urgent": "persist"}}
    d = await decide(policy, _rec(priority="urgent"), active=False, now=NOW)
    assert (d.action, d.reason) == ("discard", None)  # a policy's decision has only the reason it gave
    assert d.dump() == {"action": "discard"}  # as Mastra's {action: "discard"}
    d = await decide(policy, _rec(priority="urgent", source="slack"), active=False, now=NOW)
    assert (d.action, d.reason) == ("persist", None)


async def test_default_decision_and_string_decisions():
    d = await decide({"default": "persist"}, _rec(priority="urgent"), active=True, now=NOW)
    assert (d.action, d.reason) == ("persist", None)
    d = await decide({"priorities": {"low": {"action": "defer", "reason": "later"}}}, _rec(priority="low"),
                     active=False, now=NOW)
    assert (d.action, d.reason, d.deliver_at) == ("defer", "later", NOW)


def test_n13_digest_counts_per_source_pending_and_highest_priority():
    records = [_rec(id="a", priority="high"), _rec(id="b", priority="low"), _rec(id="c", source="ci", priority="low")]
    sig = digest_signal(records, pending=3)
    assert _markup(sig) == '<notification-summary pending="3" priority="high">ci: 1, github: 2</notification-summary>'
    assert sig["metadata"]["notification"]["notificationIds"] == ["a", "b", "c"]
    assert digest_signal([], pending=0)["contents"] == "No pending notifications"


def test_n15_builtin_attributes_override_the_callers():
    sig = notification_signal(_rec(attributes={"type": "x", "repo": "a"}, summary="CI red"))
    markup = _markup(sig)
    assert 'type="ci-status"' in markup and 'repo="a"' in markup and 'type="x"' not in markup
    assert markup.endswith(">CI red</notification>")


def test_coalesced_records_render_as_one_notification():
    sig = combined_notification_signal([_rec(id="a", summary="one", coalesce_key="k"),
                                        _rec(id="b", summary="two", coalesce_key="k", priority="high")])
    assert sig["contents"] == "one\ntwo" and sig["attributes"]["coalescedCount"] == 2
    assert sig["attributes"]["priority"] == "high" and sig["metadata"]["notification"]["notificationIds"] == ["a", "b"]


@pytest.mark.parametrize(("priority", "active", "action", "reason"), [
    ("urgent", True, "deliver", "urgent"), ("urgent", False, "deliver", "urgent"),
    ("high", True, "summarize", "active-high-summary-then-full"), ("high", False, "deliver", "idle-high"),
    ("medium", True, "summarize", "active-batch-summary"), ("medium", False, "deliver", "idle-medium"),
    ("low", True, "summarize", "active-batch-summary"), ("low", False, "summarize", "idle-low-summary"),
])
def test_default_policy_table(priority, active, action, reason):
    d = default_decision(priority, active, NOW)
    assert (d.action, d.reason) == (action, reason)
    if (priority, active) == ("high", True):
        assert d.summary_at == NOW and d.deliver_at == NOW


async def test_agent_digest_window_and_decide_signature():
    d = await decide({"digest_window_s": 1.0}, _rec(priority="low"), active=True, now=NOW)
    assert d.summary_at == NOW + timedelta(seconds=1)
    seen = {}

    def only_record(record):
        seen["record"] = record.priority
        return "hold"

    d = await decide({"decide": only_record}, _rec(priority="high"), active=False, now=NOW)
    assert d.action == "hold" and seen == {"record": "high"}


def test_retry_backoff_grows_and_is_capped():
    assert [retry_delay_s(n) for n in range(1, 9)] == [5, 10, 20, 40, 80, 160, 300, 300]
