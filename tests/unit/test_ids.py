"""Ids sort in the order they were made, also within one millisecond (records stored in one
transaction share ``created_at`` and are listed by id: the inbox listed a batch out of order)."""

from __future__ import annotations

from threadline.ids import new_id


def test_ids_made_in_one_millisecond_still_increase():
    ids = [new_id("ntf") for _ in range(5000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert len({i[4:16] for i in ids}) < len(ids)  # many shared a millisecond: the case that broke


def test_shape_prefix_and_time_order():
    a, b = new_id(), new_id("run")
    assert len(a) == 26 and all(c in "0123456789abcdef" for c in a)
    assert b.startswith("run_") and len(b) == 30 and b[4:] > a
