"""Identifiers: time-ordered, URL- and topic-safe hex strings."""

from __future__ import annotations

import os
import time


def new_id(prefix: str = "") -> str:
    """Return a new 26-hex-char id, ordered by creation time (ms) then random.

    Args:
        prefix: prepended as ``prefix_`` when given (e.g. ``run`` → ``run_0193…``).
    """
    raw = f"{int(time.time() * 1000):012x}{os.urandom(7).hex()}"
    return f"{prefix}_{raw}" if prefix else raw
