"""Identifiers: time-ordered, URL- and topic-safe hex strings."""

from __future__ import annotations

import os
import threading
import time

_lock = threading.Lock()
_last = 0


def new_id(prefix: str = "") -> str:
    """Return a new 26-hex-char id, ordered by creation time (ms) then random.

    Ids made by one process are strictly increasing, also within one millisecond (the random part
    of a later id is then the earlier one's + 1), so records stored in one transaction (one
    ``created_at``) still sort in the order they were made.

    Args:
        prefix: prepended as ``prefix_`` when given (e.g. ``run`` → ``run_0193…``).
    """
    global _last
    with _lock:
        value = (int(time.time() * 1000) << 56) | int.from_bytes(os.urandom(7), "big")
        if value <= _last:
            value = _last + 1
        _last = value
    raw = f"{value:026x}"
    return f"{prefix}_{raw}" if prefix else raw
