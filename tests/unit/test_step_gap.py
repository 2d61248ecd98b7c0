"""The step overhead split into segments (threadline.worker.step_gap)."""

from __future__ import annotations

from threadline.worker.step_gap import POINTS, SAVE_SEGMENTS, SEGMENTS, save_split, segments


def test_segments_are_the_milliseconds_between_consecutive_points():
    points = dict(zip(POINTS, (10.0, 10.004, 10.0065, 10.0065, 10.008, 10.011), strict=True))
    got = segments(points)
    assert got is not None and list(got) == list(SEGMENTS)
    assert got == {"chunk_flush_ms": 4.0, "save_claim_ms": 2.5, "result_publish_ms": 0.0, "handover_ms": 1.5,
                   "next_setup_ms": 3.0, "total_ms": 11.0}


def test_a_missing_point_or_readings_out_of_order_give_no_segments():
    points = dict(zip(POINTS, (1.0, 2.0, 3.0, 4.0, 5.0, 6.0), strict=True))
    assert segments({**points, "first_sent": None}) is None  # the next step sent nothing
    assert segments({k: v for k, v in points.items() if k != "saved"}) is None
    assert segments({**points, "published": 2.5}) is None  # not one gap's readings


def test_save_split_divides_the_save_at_the_statement():
    points = {"flushed": 1.0, "save_sent": 1.002, "save_returned": 1.0125, "saved": 1.013}
    split = save_split(points)
    assert list(split) == list(SAVE_SEGMENTS)
    assert split == {"save_wait_ms": 2.0, "save_sql_ms": 10.5, "save_after_ms": 0.5}
    assert save_split({**points, "save_sent": 0.0}) == {}  # not a continued step's save
    assert save_split({**points, "save_returned": 0.5}) == {}  # out of order
