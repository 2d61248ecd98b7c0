"""D02 (cases-3), the pure part (decision 215): where a thread's stored messages end and its
stream takes over."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from threadline.gateway.seam import LOOKBACK_MS, Seam, after, seam, start_ms, stored_part

pytestmark = pytest.mark.unit


def _runs(*statuses: str) -> list[dict[str, str]]:
    return [{"run_id": f"run_{i:02d}", "status": s} for i, s in enumerate(statuses)]


@pytest.mark.parametrize(("statuses", "expected"), [
    ((), Seam(None, frozenset())),
    (("finished", "aborted"), Seam("run_01", frozenset())),
    (("running",), Seam(None, frozenset({"run_00"}))),
    (("finished", "failed", "running"), Seam("run_01", frozenset({"run_02"}))),
    # a run that ended after one still running (a queued turn made and ended later) is live too
    (("finished", "running", "finished"), Seam("run_00", frozenset({"run_01", "run_02"}))),
])
def test_the_seam_is_the_first_run_that_has_not_ended(statuses, expected):
    assert seam(_runs(*statuses)) == expected


def test_the_answer_leaves_out_the_live_runs_messages_only():
    cut = seam(_runs("finished", "running"))
    messages = [{"id": "m1", "run_id": "run_00"}, {"id": "p1", "run_id": None}, {"id": "m2", "run_id": "run_01"}]
    assert [m["id"] for m in stored_part(messages, cut)] == ["m1", "p1"]


def test_the_stream_sends_the_runs_after_the_seam_read_from_before_its_creation():
    assert after("run_0193b", "run_0193a") and not after("run_0193a", "run_0193a")
    assert not after("run_0193", "run_0193a") and not after(None, "run_0193a")
    created = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
    assert start_ms(created) == int(created.timestamp() * 1000) - LOOKBACK_MS
