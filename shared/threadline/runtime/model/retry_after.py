"""How long a provider asked us to wait: ``Retry-After`` and ``retry-after-ms`` (decision 195).

``Retry-After`` is delay-seconds or an HTTP-date (RFC 9110 §10.2.3); OpenAI-style providers add
``retry-after-ms``. A pure function of the answer's headers (and, for a date without a ``Date``
header, the local clock).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from datetime import UTC
from email.utils import parsedate_to_datetime

_SECONDS = re.compile(r"\d+(?:\.\d+)?")
"""delay-seconds (RFC 9110: ``1*DIGIT``; a decimal fraction is accepted, as providers send it)."""


def retry_after_s(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """Seconds to wait before retrying, per the error answer's headers; ``None``: no usable hint.

    ``headers``: the answer's headers (names in any case). ``now``: Unix seconds of the local
    clock, used only for an HTTP-date when the answer has no valid ``Date`` header (default: now).

    Order: a valid ``retry-after-ms`` (a finite number ≥ 0; the more precise of the two, and a
    malformed ``Retry-After`` does not hide it); else ``Retry-After`` as delay-seconds (surrounding
    whitespace ignored); else as an HTTP-date, measured against the answer's ``Date`` header
    (the provider's clock, so a skewed local clock does not move the wait) — a date in the past
    is ``0.0``. Anything else (``soon``, ``-3``, ``nan``, ``inf``) is ``None``: the caller's own
    backoff applies.
    """
    if not headers:
        return None
    lower = {str(k).lower(): str(v) for k, v in headers.items()}
    ms = _number(lower.get("retry-after-ms"))
    if ms is not None:
        return ms / 1000
    value = lower.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    at = _http_date(value)
    if at is None:
        return None
    reference = _http_date(lower.get("date"))
    if reference is None:
        reference = time.time() if now is None else now
    return max(0.0, at - reference)


def _number(value: str | None) -> float | None:
    """A non-negative finite decimal number (whitespace around it ignored), else ``None``."""
    if value is None or not _SECONDS.fullmatch(value.strip()):
        return None
    number = float(value.strip())
    return number if math.isfinite(number) else None


def _http_date(value: str | None) -> float | None:
    """An HTTP-date (IMF-fixdate or an obsolete form) as Unix seconds, else ``None``."""
    if not value:
        return None
    try:
        parsed = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if parsed.tzinfo is None:  # HTTP-dates are GMT; a date without a zone is read as GMT too
        return parsed.replace(tzinfo=UTC).timestamp()
    return parsed.timestamp()
