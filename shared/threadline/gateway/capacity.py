"""How many streams a gateway may serve: its setting, within its file-descriptor limit (decision 223).

Every open stream holds one descriptor (its client's socket) until it ends, and so does every
request being answered — the refusals at capacity among them. A gateway whose stream limit is
above what its descriptors allow runs out of them first: ``accept`` fails with "Too many open
files", new connections wait in the backlog unanswered, and reads and writes of every caller
hang. So the streams a gateway serves are capped at half the descriptors left when it starts
(:func:`stream_limit`); the other half answers writes, reads and refusals (503 ``at_capacity``
with ``Retry-After``) however many viewers arrive. The limit in force is logged at start and is
``threadline_gateway_max_streams`` on ``/metrics``.
"""

from __future__ import annotations

import os
import resource


def stream_limit(setting: int, *, descriptor_limit: int, descriptors_open: int) -> int:
    """The streams a gateway serves: ``setting`` (``THREADLINE_GATEWAY_MAX_STREAMS``), at most half
    of the descriptors left (``descriptor_limit`` − ``descriptors_open``), at least 1.
    ``descriptor_limit`` < 0 (``RLIM_INFINITY``) leaves ``setting`` as it is."""
    if descriptor_limit < 0:
        return setting
    return max(1, min(setting, (descriptor_limit - descriptors_open) // 2))


def descriptors() -> tuple[int, int]:
    """``(soft RLIMIT_NOFILE, descriptors open now)`` of this process (Linux: ``/proc/self/fd``;
    elsewhere the count is 0)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        open_now = len(os.listdir("/proc/self/fd"))
    except OSError:
        open_now = 0
    return soft, open_now
