"""A coalesce_key group is delivered oldest record first, whatever order the due query returned
(two records due at the same instant came back newest first and the combined notification read
"build 2 red / build 1 red")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from threadline.store.inbox import _items

pytestmark = pytest.mark.unit

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _rec(rid: str, age_s: int, key: str | None = "ci") -> dict:
    return {"id": rid, "source": "github", "coalesce_key": key, "priority": "medium",
            "created_at": T0 + timedelta(seconds=age_s)}


def test_a_coalesce_group_is_oldest_first_whatever_the_query_order():
    groups = _items([_rec("n2", 2), _rec("solo", 5, key=None), _rec("n1", 1)])  # type: ignore[list-item]
    assert [[r["id"] for r in g] for g in groups] == [["n1", "n2"], ["solo"]]
