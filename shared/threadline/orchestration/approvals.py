"""What an approve or decline does (decisions 226-227), as a pure decision on the run and the
held call as the orchestrator read them under their locks: :func:`on_answer`. The writes are in
:mod:`threadline.flows.approvals`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class Answer:
    """The verdict on one answer to a held call."""

    record: bool
    """Record it (the call was pending and its run is running): the call's status changes, and
    the run resumes once its step is suspended and no call of it is outstanding (an answer may
    come before the orchestrator applied the suspended step: the call is recorded before its
    ``tool-call-approval`` chunk goes out)."""
    status: Literal["approved", "declined", "pending", "unknown"]
    """The call's status the reply reports: the new one when recorded; else as stored (a
    repeated answer: the first one's), ``unknown`` for a call the thread's run never held."""


def on_answer(run: Mapping[str, object] | None, call: Mapping[str, object] | None, *, resource_id: str,
              thread_id: str, approved: bool) -> Answer:
    """Decide an answer to ``call`` of ``run`` sent for ``resource_id`` / ``thread_id``.

    Tenancy as every write: a run of another resource or thread is ``unknown`` (nothing is
    said about it). A call already answered keeps its first answer (idempotent: approving twice
    runs the tool once). A run no longer running (aborted, failed) records nothing.
    """
    if run is None or call is None or run.get("resource_id") != resource_id or run.get("thread_id") != thread_id:
        return Answer(record=False, status="unknown")
    stored = str(call.get("status"))
    if stored != "pending":
        return Answer(record=False, status="approved" if stored == "approved" else "declined")
    if run.get("status") != "running":
        return Answer(record=False, status="pending")
    return Answer(record=True, status="approved" if approved else "declined")
