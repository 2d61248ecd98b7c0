"""D13 (pure part): the page size and cursors of a thread's list reads (decision 221,
``threadline.store.paging``) — limits capped and checked, cursors that round-trip to the
microsecond and belong to one read, and the cut of a page by its flags."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from threadline.store import paging

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("raw", "expected"), [(None, paging.DEFAULT_LIMIT), ("1", 1), ("1000", 1000),
                                               ("5000", paging.MAX_LIMIT)])
def test_a_limit_defaults_and_is_capped(raw, expected):
    assert paging.page_limit(raw) == expected
    assert paging.DEFAULT_LIMIT <= 200 and paging.MAX_LIMIT <= 1000


@pytest.mark.parametrize("raw", ["0", "-3", "ten", ""])
def test_a_limit_below_one_or_not_a_number_is_refused(raw):
    with pytest.raises(ValueError, match=r"limit|int"):
        paging.page_limit(raw)


def test_a_messages_cursor_round_trips():
    assert paging.after_position(None) == 0
    assert paging.after_position(paging.position_cursor(123_456_789_012)) == 123_456_789_012


@pytest.mark.parametrize("read", ["runs", "inbox"])
def test_a_time_cursor_keeps_the_microsecond_and_the_id(read):
    at = datetime(2026, 12, 6, 12, 0, 0, 999_999, tzinfo=UTC)
    for moment in (at, at + timedelta(microseconds=1), datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC)):
        assert paging.after_time(read, paging.time_cursor(read, moment, "run-ü/1")) == (moment, "run-ü/1")
    assert paging.after_time(read, None) is None


_AT = datetime(2026, 12, 6, 12, 0, 0, 1, tzinfo=UTC)  # fixed: every xdist worker collects the same test ids


@pytest.mark.parametrize("cursor", ["", "!!!", "bm90IGpzb24", paging.time_cursor("runs", _AT, "r"),
                                    paging.time_cursor("inbox", _AT, "r")])
def test_a_cursor_of_another_read_or_none_at_all_is_refused_for_messages(cursor):
    with pytest.raises(paging.CursorError):
        paging.after_position(cursor)


def test_a_cursor_of_one_time_read_is_refused_by_the_other():
    with pytest.raises(paging.CursorError):
        paging.after_time("inbox", paging.time_cursor("runs", datetime.now(UTC), "r"))
    with pytest.raises(paging.CursorError):
        paging.after_time("runs", paging.position_cursor(3))


@pytest.mark.parametrize(("flags", "expected"), [
    ([], (0, False)),  # nothing (left) to read
    ([True, True], (2, False)),  # fewer rows than limit + 1: the last page
    ([True, True, False], (2, True)),  # limit reached: the (limit + 1)th row says more follow
    ([True, False, False], (1, True)),  # the byte budget ended the page early
])
def test_a_page_keeps_the_leading_flagged_rows_and_says_whether_more_follow(flags, expected):
    assert paging.kept(flags) == expected
