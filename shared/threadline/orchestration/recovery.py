"""Is this run stuck, and what drives it on? A pure function over one snapshot of the run.

A run is *stuck* when it still holds its thread (``running``, or ended in Postgres while its
lease is still held) and nothing can move it: no worker beats its step's heartbeat, no row of
it waits in the outbox for the relay, and nothing about it changed for ``stuck_after_s``. The
run-orchestrator's sweeper (:mod:`threadline.flows.sweeper`) asks :func:`decide` for every
such candidate and applies the answer (:mod:`threadline.flows.recovery`):

``reschedule``
    the current step was not stored: a new step task for it goes through the outbox (a worker
    re-executes the step under the next attempt);
``redeliver_result``
    the step was stored (``steps_done = step + 1``, or the run ended in Postgres) but the
    orchestrator never applied its result: the stored result is published again (same event
    id, so an orchestrator that did apply it drops the copy);
``fail``
    the run cannot go on (it was recovered ``max_recoveries`` times without progress, lost its
    lease while running, or its counters make no sense): it fails with the reason.

Every answer other than ``none`` is a recovery: a bug elsewhere that the sweeper covered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Action = Literal["none", "reschedule", "redeliver_result", "fail"]


@dataclass(frozen=True, slots=True)
class RunSnapshot:
    """What the sweeper knows about one run (ages in seconds, ``None`` when unset).

    Attributes:
        status: ``runs.status``.
        step: the step being executed (``runs.step``).
        steps_done: steps stored (``runs.steps_done``).
        idle_s: seconds since the run's row last changed (``runs.updated_at``).
        heartbeat_age_s: seconds since the step's owner last beat (``runs.step_heartbeat``);
            ``None`` when no one owns the step or it was handed back.
        holds_lease: the thread lease names this run at its epoch.
        outbox_pending: a row for the run's thread waits in the outbox (the relay's job).
        recoveries: how often the sweeper already recovered this run.
        results_applied: the step results the orchestrator applied (``runs.results_applied``);
            ``None``: not known. Fewer than ``step``: an earlier result (of a step a worker
            continued itself) was lost on its way, and the later ones wait behind it.
    """

    status: str
    step: int
    steps_done: int
    idle_s: float
    heartbeat_age_s: float | None
    holds_lease: bool
    outbox_pending: bool
    recoveries: int = 0
    results_applied: int | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    reason: str


def decide(run: RunSnapshot, *, stuck_after_s: float, max_recoveries: int = 3) -> Decision:
    """What to do with ``run`` (see the module docstring).

    Args:
        run: the snapshot.
        stuck_after_s: how long a run may show no sign of progress before it counts as stuck.
        max_recoveries: recoveries after which a still stuck run is failed instead.
    Returns:
        The :class:`Decision`; ``action == "none"`` when the run is not stuck.
    """
    if run.status != "running" and not run.holds_lease:
        return Decision("none", "ended and released")
    if run.idle_s < stuck_after_s:
        return Decision("none", "changed recently")
    if run.heartbeat_age_s is not None and run.heartbeat_age_s < stuck_after_s:
        return Decision("none", "a worker executes the step")
    if run.outbox_pending:
        return Decision("none", "an outbox row waits for the relay")
    if run.recoveries >= max_recoveries:
        return Decision("fail", f"still stuck after {run.recoveries} recoveries (step {run.step}, "
                                f"{run.steps_done} steps stored)")
    gap = run.results_applied is not None and run.results_applied < run.step
    if run.status != "running":
        if gap:
            return Decision("redeliver_result", f"step {run.results_applied} stored but its result was never "
                                                f"applied (run {run.status} in the store, lease still held, "
                                                f"idle {run.idle_s:.0f} s)")
        return Decision("redeliver_result", f"run {run.status} in the store but its result was never applied "
                                            f"(lease still held, idle {run.idle_s:.0f} s)")
    if not run.holds_lease:
        return Decision("fail", "running without its thread lease")
    if run.steps_done == run.step + 1:
        if gap:
            return Decision("redeliver_result", f"step {run.results_applied} stored but its result was never "
                                                f"applied (step {run.step} stored, idle {run.idle_s:.0f} s)")
        return Decision("redeliver_result", f"step {run.step} stored but the next step was never scheduled "
                                            f"(idle {run.idle_s:.0f} s)")
    if run.steps_done == run.step:
        owner = ("no step owner" if run.heartbeat_age_s is None
                 else f"owner's heartbeat still for {run.heartbeat_age_s:.0f} s")
        return Decision("reschedule", f"step {run.step} in flight nowhere ({owner}, idle {run.idle_s:.0f} s)")
    return Decision("fail", f"inconsistent counters: step {run.step}, {run.steps_done} steps stored")
