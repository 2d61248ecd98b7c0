"""The bench's rate of records read in fetched batches (figure 2 and its raw baseline): the first
batch's records arrived before its fetch, over a time not seen, so they are not counted."""

from __future__ import annotations

import math

from bench.stats import arrival_rate


def test_the_records_after_the_first_batch_over_the_span() -> None:
    times = [1.0] * 1500 + [1.1] * 100 + [1.2] * 100
    got = arrival_rate(times)
    assert math.isclose(got["chunks_per_s"], 200 / 0.2)  # not 1,699 / 0.2: the first batch came in no time
    assert got["batches"] == 3 and got["first_batch"] == 1500


def test_one_batch_has_no_rate() -> None:
    assert math.isnan(arrival_rate([2.0] * 50)["chunks_per_s"])
    assert math.isnan(arrival_rate([])["chunks_per_s"])
