"""A coalesce_key group is delivered oldest record first, whatever order the due query returned
(two records due at the same instant came back newest first and the combined notification read
"build 2 red / build 1 red")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from threadline.flows.inbox import _items

pytestmark = pytest.mark.unit

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _rec(rid: str, age_s: int, key: str | None = "ci") -> dict:
    return {"id": rid, "source": "github", "coalesce_key": key, "priority": "medium",
            "created_at": T0 + timedelta(seconds=age_s)}


def test_a_coalesce_group_is_oldest_first_whatever_the_query_order():
    groups = _items([_rec("n2", 2), _rec("solo", 5, key=None), _rec("n1", 1)])  # type: ignore[list-item]
    assert [[r["id"] for r in g] for g in groups] == [["n1", "n2"], ["solo"]]


def test_records_of_one_request_share_created_at_and_keep_the_order_they_were_made():
    """Both records of one ``send_notification_signal`` are stored in one transaction (one
    ``created_at``): the combined notification still reads "build 1 red / build 2 red"."""
    first, second = {**_rec("ntf_0193a", 0), "summary": "build 1 red"}, {**_rec("ntf_0193b", 0), "summary": "build 2 red"}
    groups = _items([second, first])  # type: ignore[list-item]
    assert [[r["summary"] for r in g] for g in groups] == [["build 1 red", "build 2 red"]]
