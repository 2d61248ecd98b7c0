"""The step overhead split into segments (threadline.worker.step_gap)."""

from __future__ import annotations

import asyncio

from threadline._internal import step_clock
from threadline.worker.step_gap import (
    POINTS,
    SAVE_SEGMENTS,
    SEGMENTS,
    START_POINTS,
    START_SEGMENTS,
    save_split,
    segments,
    start_segments,
)


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


def test_start_segments_split_a_step_begun_from_its_task():
    points = dict(zip(START_POINTS, (5.0, 5.003, 5.005, 5.0125, 5.013), strict=True))
    got = start_segments(points)
    assert got is not None and list(got) == list(START_SEGMENTS)
    assert got == {"claim_ms": 3.0, "setup_ms": 2.0, "model_open_ms": 7.5, "first_text_ms": 0.5, "total_ms": 13.0}


def test_a_step_without_text_has_the_segments_up_to_its_last_point_and_no_total():
    points = {"received": 5.0, "claimed": 5.003, "model_called": 5.005, "model_opened": 5.0125}
    assert start_segments(points) == {"claim_ms": 3.0, "setup_ms": 2.0, "model_open_ms": 7.5}
    assert start_segments({"received": 5.0, "claimed": 5.002}) == {"claim_ms": 2.0}
    assert start_segments({"received": 5.0}) is None
    assert start_segments({**points, "model_called": 5.001, "claimed": 5.004}) is None  # out of order


async def test_a_step_clock_mark_lands_in_the_timed_step_and_keeps_its_first_reading():
    step_clock.mark("model_called")  # nothing timed here: nothing recorded, nothing raised
    points: dict[str, float] = {"received": 1.0}
    token = step_clock.POINTS.set(points)
    try:
        child = asyncio.create_task(_two_marks())  # the step's task copies the context
    finally:
        step_clock.POINTS.reset(token)
    await child
    assert set(points) == {"received", "first_text"}
    assert points["first_text"] == child.result()
    step_clock.mark("first_text")
    assert points["first_text"] == child.result()  # outside the step: untouched


async def _two_marks() -> float:
    step_clock.mark("first_text")
    first = step_clock.POINTS.get()["first_text"]  # type: ignore[index]  # set just above
    step_clock.mark("first_text")  # a second text chunk keeps the first reading
    return first
