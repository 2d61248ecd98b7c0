"""D08 (the parser): ``Retry-After`` in every legal form and some illegal ones, as a pure function
of the answer's headers (threadline.runtime.model.retry_after; decision 195)."""

from __future__ import annotations

from email.utils import formatdate

import httpx
import pytest

from threadline.runtime.model.model_calls import RetryPolicy
from threadline.runtime.model.retry_after import retry_after_s

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0
"""The FM's clock in these answers (Unix seconds)."""


def _date(at: float) -> str:
    return formatdate(at, usegmt=True)


@pytest.mark.parametrize(("headers", "expected"), [
    ({"retry-after": "3"}, 3.0),                                            # (a) delay-seconds
    ({"Retry-After": _date(NOW + 4), "Date": _date(NOW)}, 4.0),             # (b) HTTP-date vs Date
    ({"retry-after-ms": "500"}, 0.5),                                       # (c)
    ({"retry-after": "soon", "retry-after-ms": "700"}, 0.7),                # (d) malformed does not hide ms
    ({"retry-after": "-3"}, None),                                          # (e) backoff applies
    ({"retry-after": "nan"}, None),                                         # (e')
    ({"retry-after": "inf"}, None),
    ({"retry-after": " 2 "}, 2.0),                                          # (e'') whitespace trimmed
    ({"retry-after": _date(NOW - 60), "date": _date(NOW)}, 0.0),            # (f) a past date: at once
    ({"retry-after": "120"}, 120.0),                                        # (g) returned as sent
    ({"retry-after": "Thu, 13 Aug 2026 15:37:13 GMT", "date": "Thu, 13 Aug 2026 15:37:10 GMT"}, 3.0),
    ({"retry-after": "2026"}, 2026.0),                                      # a number is seconds, never a year
    ({"retry-after-ms": "-5", "retry-after": "1"}, 1.0),                    # a bad ms falls back to the header
    ({}, None),
])
def test_d08_retry_after_forms(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after_s(headers, now=NOW + 1000) == expected
    assert retry_after_s(httpx.Headers(headers), now=NOW + 1000) == expected  # names in any case


def test_d08_an_http_date_is_measured_against_the_answers_date_not_the_local_clock() -> None:
    """(h): the local clock 30 s ahead changes nothing while the answer has a ``Date``; without
    one the local clock is the only reference."""
    headers = {"retry-after": _date(NOW + 4), "date": _date(NOW)}
    assert retry_after_s(headers, now=NOW + 30) == 4.0
    assert retry_after_s({"retry-after": _date(NOW + 4)}, now=NOW) == 4.0
    assert retry_after_s({"retry-after": _date(NOW + 4)}, now=NOW + 30) == 0.0
    assert retry_after_s({"retry-after": _date(NOW + 4), "date": "garbage"}, now=NOW + 1) == 3.0


def test_d08_a_wait_beyond_the_cap_is_refused_not_shortened() -> None:
    policy = RetryPolicy(initial_s=2, max_wait_s=10)
    assert policy.refuses(120) and not policy.refuses(10) and not policy.refuses(None)
    assert 0.0 <= policy.delay(0, 0.0) == 0.0
    assert 3.0 <= policy.delay(0, 3.0) <= 3.3
