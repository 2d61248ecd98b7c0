"""The step overhead split into segments (threadline.worker.step_gap)."""

from __future__ import annotations

from threadline.worker.step_gap import POINTS, SEGMENTS, segments


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
