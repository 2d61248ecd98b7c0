"""The seam between a thread's stored messages and its live stream (docs/gateway.md, "Showing a
thread with its live tail"; decision 215).

``GET …/messages`` reads the thread's runs and messages in one snapshot and leaves out every
message of the first run that has not ended and of every run after it; its ``stream.after_run``
names the newest run whose messages it holds. ``GET …/events?after_run=<it>`` then sends the
chunks of the runs after that one, each run from its first chunk: what the answer does not hold,
and nothing it does. The seam is a run, not a time or an offset, so a step stored between the two
reads neither doubles nor drops the turn in progress.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

ENDED = frozenset({"finished", "failed", "aborted", "tripwire"})
"""Run statuses after which a run's stored messages are complete."""
LOOKBACK_MS = 5000
"""How far (ms) before the ``after_run``'s creation a stream starts reading the topic: the first
chunk of the run after it comes later, whatever the clocks of the processes that wrote them."""


@dataclass(frozen=True)
class Seam:
    """Where stored messages end and the stream takes over: ``after_run`` (the newest run whose
    messages are all stored, ``None``: no such run, read the stream from its beginning) and the
    ``live`` runs whose messages the answer leaves out."""

    after_run: str | None
    live: frozenset[str]


def seam(runs: Sequence[Mapping[str, object]]) -> Seam:
    """The :class:`Seam` of a thread's ``runs`` (``{run_id, status}``, oldest first): the runs from
    the first one that has not ended on are live."""
    for i, run in enumerate(runs):
        if run["status"] not in ENDED:
            before = str(runs[i - 1]["run_id"]) if i else None
            return Seam(before, frozenset(str(r["run_id"]) for r in runs[i:]))
    return Seam(str(runs[-1]["run_id"]) if runs else None, frozenset())


def stored_part(messages: Sequence[Mapping[str, object]], cut: Seam) -> list[Mapping[str, object]]:
    """The messages an answer holds: all but those of ``cut``'s live runs."""
    return [m for m in messages if m.get("run_id") not in cut.live]


def start_ms(after_created_at: datetime) -> int:
    """The topic time (ms since the epoch) a stream ``after_run`` starts reading at."""
    return int(after_created_at.timestamp() * 1000) - LOOKBACK_MS


def after(run_id: object, after_run: str) -> bool:
    """True for a chunk of a run after ``after_run``: run ids are ordered by creation (decision 166),
    and a thread's runs are created one after the other."""
    return isinstance(run_id, str) and run_id > after_run
