"""What a subscription reports as the thread's active run (Mastra's ``activeRunId()``)."""

from __future__ import annotations


def not_finished(holder: str | None, finished: str | None) -> str | None:
    """The lease holder ``holder`` as the active run, unless it is the run whose ``finish`` the
    subscriber delivered last (``finished``): a run never goes on after its finish, and its lease
    is released just after the finish is published (by the orchestrator, once it applied the
    run's last step)."""
    return None if holder is not None and holder == finished else holder
