"""The run state machine's decisions: what a ``start_run``, a ``step_result`` or an ``abort_run``
does to a run, and which run takes the thread over when one ends. Pure: whichever service moves a
run — the orchestrator, ingress starting a fresh run's step 0, the worker storing a step — reads
the row (or knows it), calls these, and writes what they answer in one transaction; the store's
statements check that the row is still the one decided on, and hold no rule of their own.

- ``start_run`` of a run that is running at the command's epoch with no step done:
  :class:`ScheduleStep` 0 (announcing ``thread_active`` unless the lease was handed over, and
  ``run_started``); any other run (missing, ended, another epoch, already stepping): :class:`Ignore`.
  The transaction that creates a fresh run (ingress) asks the same rule on the run as created
  (:meth:`RunRow.created`) and publishes step 0's task itself; the ``start_run`` it sends then
  says ``scheduled`` and is :class:`AnnounceStart` (the start's lifecycle only) unless the start
  was announced already (:func:`unannounced_start`: whichever transaction on the run comes first
  announces it, docs/decisions.md 34-35).
- ``step_result`` ``continue`` at the run's epoch: :class:`ScheduleStep` step + 1 (``step_finished``);
  when the worker that stored the step already claimed the next one: :class:`Announce`
  (``step_finished`` only, no step task).
- ``step_result`` of a step after one whose result was never applied (lost on its way):
  :class:`Defer` (left unapplied; the sweeper publishes the missing result, then this one, again).
- ``step_result`` ``finished`` / ``failed`` / ``tripwire`` / ``aborted`` at the run's epoch:
  :class:`EndRun` (``step_finished``, the terminal event, the ``generate`` result).
- ``step_result`` ``suspended`` (the step called sub-agents) at the run's epoch:
  :class:`SuspendRun` (the child runs start; the next step is scheduled when they all ended).
- ``step_result`` of a missing run, of another epoch, or of an aborted run: :class:`Ignore`.
- The worker storing a step applies the same ``step_result`` rule before anyone sends it
  (:func:`plan_save`, docs/decisions.md 106): where the orchestrator would schedule the next step
  the worker claims it, and where it would then only announce the stored step the worker
  announces it, each under the guard that the row is as the plan assumed.
- ``abort_run`` of the thread's active run (or the one it names), running: :class:`AbortActive`;
  otherwise :class:`NothingToAbort`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from threadline.events.commands import StartRun, StepResult
from threadline.ids import new_id

TERMINAL: dict[str, str] = {"finished": "run_finished", "failed": "run_failed", "tripwire": "run_tripwire",
                            "aborted": "run_aborted"}
"""Step outcome that ends a run → the lifecycle event announcing it."""
LifecycleKind = Literal["thread_active", "run_started", "step_finished"]


@dataclass(frozen=True, slots=True)
class RunRow:
    """The fields of a ``runs`` row the transitions read."""

    run_id: str
    """The run."""
    resource_id: str
    """The thread's owner."""
    thread_id: str
    """The thread."""
    agent_id: str
    """The run's agent."""
    status: str
    """``running``, ``finished``, ``failed``, ``tripwire`` or ``aborted``."""
    epoch: int
    """The lease epoch the run holds."""
    step: int
    """The current step (0-based)."""
    steps_done: int
    """Steps whose result is stored (``step + 1`` when no step is outstanding)."""
    attempt: int
    """The current step's attempt number (from 1)."""
    kind: str
    """``stream`` or ``generate`` (a ``generate`` is answered with a ``result`` reply)."""
    request_id: str | None
    """The request that started the run."""
    reply_to: str | None
    """Where that request's replies go."""
    continued_from: int | None = None
    """The step of the step task whose handling the current step continues (a worker claimed
    the steps after it itself); ``None``: the current step had a step task of its own."""
    results_applied: int | None = None
    """The step results the orchestrator applied (the next one it applies is this step's);
    ``None``: not known (no gap is looked for)."""
    start_announced: bool = True
    """``thread_active`` / ``run_started`` were announced; ``False`` only for a run whose step 0
    ingress scheduled, until the orchestrator announces its start (or the worker that stores a
    continued step of it does, docs/decisions.md 103)."""

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> RunRow:
        """The view of a ``runs`` row (an ``asyncpg.Record`` or a dict)."""
        return cls(run_id=row["run_id"], resource_id=row["resource_id"], thread_id=row["thread_id"],
                   agent_id=row["agent_id"], status=row["status"], epoch=row["epoch"], step=row["step"],
                   steps_done=row["steps_done"], attempt=row["attempt"], kind=row["kind"],
                   request_id=row["request_id"], reply_to=row["reply_to"],
                   continued_from=row.get("continued_from"), results_applied=row.get("results_applied"),
                   start_announced=row.get("start_announced", True))

    @classmethod
    def created(cls, *, run_id: str, resource_id: str, thread_id: str, agent_id: str, epoch: int, kind: str,
                request_id: str | None, reply_to: str | None) -> RunRow:
        """The run as the transaction that creates it (ingress, on a wake) writes it: running at
        ``epoch``, step 0 not started, its start not announced yet."""
        return cls(run_id=run_id, resource_id=resource_id, thread_id=thread_id, agent_id=agent_id, status="running",
                   epoch=epoch, step=0, steps_done=0, attempt=1, kind=kind, request_id=request_id,
                   reply_to=reply_to, start_announced=False)

    @classmethod
    def stored_by_worker(cls, *, run_id: str, resource_id: str, thread_id: str, agent_id: str, epoch: int,
                         step: int, attempt: int) -> RunRow:
        """The run as the worker that holds its step's claim sees it once it stores the step:
        running at its epoch, ``step`` stored and not continued. (``kind`` and the request are
        not known there; only an :class:`EndRun` reads them, and the worker never acts on one.)"""
        return cls(run_id=run_id, resource_id=resource_id, thread_id=thread_id, agent_id=agent_id,
                   status="running", epoch=epoch, step=step, steps_done=step + 1, attempt=attempt, kind="stream",
                   request_id=None, reply_to=None)

    @property
    def outstanding(self) -> bool:
        """A step was scheduled and its result is not stored yet."""
        return self.steps_done != self.step + 1


@dataclass(frozen=True, slots=True)
class Ignore:
    """Nothing to do (a stale, duplicate or superseded event)."""

    reason: str
    """Why, for the log."""


@dataclass(frozen=True, slots=True)
class ScheduleStep:
    """Publish the step task of ``step`` (``attempt``) and announce ``lifecycle``."""

    step: int
    """The step to execute."""
    attempt: int
    """Its attempt number."""
    lifecycle: tuple[LifecycleKind, ...]
    """Lifecycle events to announce, in order."""
    finished_step: int | None = None
    """The step that just finished (announced as ``step_finished``), if any."""


@dataclass(frozen=True, slots=True)
class EndRun:
    """The run is over: announce ``step_finished`` and ``terminal``, answer a ``generate``,
    release the lease and hand the thread to what waits for it."""

    finished_step: int
    """The run's last step."""
    terminal: str
    """``run_finished``, ``run_failed``, ``run_tripwire`` or ``run_aborted``."""
    reply_result: bool
    """A ``generate`` run: its request is answered with a ``result``."""


@dataclass(frozen=True, slots=True)
class Announce:
    """The step's worker already claimed the next step (:func:`plan_save`): announce
    ``step_finished`` only; no step task (a second copy of the step would run)."""

    finished_step: int
    """The step that finished."""


@dataclass(frozen=True, slots=True)
class AnnounceStart:
    """Step 0's task was published by the transaction that created the run (ingress): announce
    ``lifecycle`` only; no step task (a second copy of step 0 would run)."""

    lifecycle: tuple[LifecycleKind, ...]
    """Lifecycle events to announce, in order."""


@dataclass(frozen=True, slots=True)
class SuspendRun:
    """The step called sub-agents: start their child runs and wait (decision 77); the run keeps
    its thread, and its next step is scheduled once no child of the step is outstanding."""

    step: int
    """The suspended step."""


@dataclass(frozen=True, slots=True)
class Defer:
    """An earlier step's result was never applied: leave this one unapplied (not even recorded as
    processed); the sweeper publishes the missing result and this one again, in order."""

    reason: str
    """Why, for the log."""


def _start_lifecycle(handover: bool) -> tuple[LifecycleKind, ...]:
    return ("run_started",) if handover else ("thread_active", "run_started")


def on_start_run(run: RunRow | None, cmd: StartRun) -> ScheduleStep | AnnounceStart | Ignore:
    """Schedule step 0 of a new run; announce ``thread_active`` (unless the lease was handed
    over from the previous run) and ``run_started``. A ``scheduled`` command (step 0's task is
    out already) only announces, once: :class:`AnnounceStart` while the start is unannounced
    (whatever the run did meanwhile), else :class:`Ignore`."""
    if run is None:
        return Ignore("no such run")
    if cmd.scheduled:
        if run.epoch != cmd.epoch or run.start_announced:
            return Ignore("start already announced")
        return AnnounceStart(lifecycle=_start_lifecycle(cmd.handover))
    if run.status != "running" or run.epoch != cmd.epoch or run.steps_done > 0:
        return Ignore("run not startable")
    return ScheduleStep(step=0, attempt=run.attempt, lifecycle=_start_lifecycle(cmd.handover))


def unannounced_start(run: RunRow) -> tuple[LifecycleKind, ...]:
    """The lifecycle an orchestrator transaction on ``run`` announces before anything else about
    it: the start of a run whose step 0 ingress scheduled and whose ``scheduled`` command has not
    been applied yet (a step result, an abort or a recovery overtook it); else nothing. Such a run
    was never handed over, so its start says ``thread_active`` too."""
    return () if run.start_announced else _start_lifecycle(False)


def on_step_result(run: RunRow | None,
                   res: StepResult) -> ScheduleStep | Announce | EndRun | SuspendRun | Defer | Ignore:
    """Schedule the next step (``continue``), or end the run.

    ``ScheduleStep.step`` is ``res.step + 1``; the store applies it only while the run is still
    at ``res.step`` with its result stored (else it is a duplicate and nothing happens). A
    ``continue`` whose next step a worker already claimed (the run is past ``res.step`` and
    ``continued_from`` covers it, read under the row lock) is only announced.
    """
    if run is None or run.epoch != res.epoch:
        return Ignore("stale step result")
    if run.status == "aborted":
        return Ignore("run aborted")  # ended by the abort itself
    if run.results_applied is not None:
        if res.step < run.results_applied:
            return Ignore("step result already applied")
        if res.step > run.results_applied:
            return Defer(f"the result of step {run.results_applied} was never applied")
    if res.outcome == "suspended":
        return SuspendRun(step=res.step)
    if res.outcome == "continue":
        if run.continued_from is not None and run.continued_from <= res.step < run.step:
            return Announce(finished_step=res.step)
        return ScheduleStep(step=res.step + 1, attempt=1, lifecycle=("step_finished",), finished_step=res.step)
    return EndRun(finished_step=res.step, terminal=TERMINAL[res.outcome],
                  reply_result=run.kind == "generate" and bool(run.request_id))


@dataclass(frozen=True, slots=True)
class ClaimNext:
    """Claim the run's next step for the worker that stores this one, in the same statement —
    only while the row is running at the result's epoch and at its step (the row the plan
    assumed; else the step is only stored and the orchestrator schedules the next one)."""

    step: int
    """The step claimed (the stored one + 1)."""
    attempt: int
    """Its attempt number."""


@dataclass(frozen=True, slots=True)
class AnnounceStored:
    """Announce the stored step in the statement that stores it, in place of its result — only
    while the next step was claimed and the run's ``results_applied`` is ``applied`` (every earlier
    result applied: the row the plan assumed); else the result goes to the orchestrator."""

    applied: int
    """The ``results_applied`` the plan assumes (the stored step); it moves to ``applied + 1``."""
    finished_step: int
    """The step announced (``step_finished``)."""
    start: tuple[LifecycleKind, ...]
    """The run's start, announced first only while ``start_announced`` is false on the row (the one
    column the storing worker cannot know; the plan gives the records for both values)."""


@dataclass(frozen=True, slots=True)
class SavePlan:
    """What the worker that stores a step writes with it: the store only (both ``None``), the
    store and the next step's claim, or the store, the claim and the step's announcement."""

    claim: ClaimNext | None = None
    """The next step claimed for this worker, or ``None``."""
    announce: AnnounceStored | None = None
    """The stored step announced by the statement (only with ``claim``), or ``None``."""


def plan_save(run: RunRow, res: StepResult) -> SavePlan:
    """The plan of the worker that stores ``res`` while holding its step's claim (``run``: the run
    as that worker sees it, :meth:`RunRow.stored_by_worker`), by the orchestrator's own rule:
    claim the next step where :func:`on_step_result` would schedule it, and announce the stored
    step where, on the row as the claim leaves it (every earlier result assumed applied),
    :func:`on_step_result` would then only :class:`Announce` it. The statement applies each part
    only while the row is as assumed (:class:`ClaimNext`, :class:`AnnounceStored`)."""
    move = on_step_result(run, res)
    if not isinstance(move, ScheduleStep):
        return SavePlan()
    claim = ClaimNext(step=move.step, attempt=move.attempt)
    chain = run.continued_from if run.continued_from is not None else res.step
    claimed = replace(run, step=move.step, steps_done=res.step + 1, attempt=move.attempt, continued_from=chain,
                      results_applied=res.step)
    then = on_step_result(claimed, res)
    if not isinstance(then, Announce):
        return SavePlan(claim=claim)
    return SavePlan(claim=claim, announce=AnnounceStored(
        applied=res.step, finished_step=then.finished_step,
        start=unannounced_start(replace(claimed, start_announced=False))))


def abort_target(active_run_id: str | None, requested: str | None) -> str | None:
    """The run an ``abort_run`` ends: the thread's active run, if it is the one requested (when
    one is named); ``None``: nothing to abort."""
    if requested is not None and requested != active_run_id:
        return None
    return active_run_id


@dataclass(frozen=True, slots=True)
class NothingToAbort:
    """No run to abort: answered ``aborted: false``."""


@dataclass(frozen=True, slots=True)
class AbortActive:
    """End the run with ``abort``: fence it, consume its input, hand the thread over."""

    emit_terminal: bool
    """No step is outstanding, so the orchestrator writes ``abort`` + ``finish`` itself (else
    the worker running the step does)."""
    reply_result: bool
    """A ``generate`` run: its request is answered with a ``result`` (``finish_reason: abort``)."""


def on_abort(run: RunRow | None) -> AbortActive | NothingToAbort:
    """What an ``abort_run`` does to its target run (see :func:`abort_target`)."""
    if run is None or run.status != "running":
        return NothingToAbort()
    return AbortActive(emit_terminal=not run.outstanding,
                       reply_result=run.kind == "generate" and bool(run.request_id))


@dataclass(frozen=True, slots=True)
class WaitingInput:
    """The oldest input waiting for a thread whose run ended: a signal delivered to that run
    after its last drain, or a queued turn."""

    mode: str
    """``deliver`` (left over from the ended run), ``queue``, or ``wake``."""
    agent_id: str | None
    """The agent it was sent to."""
    request_id: str | None
    """The request that carried it."""
    options: Mapping[str, Any]
    """Its stored options: run options plus ``run_id`` / ``kind`` / ``reply_to``."""


@dataclass(frozen=True, slots=True)
class NextRun:
    """The run that takes the thread over."""

    run_id: str
    """A queued turn keeps the id its ``accepted`` reply named; else a new id."""
    agent_id: str
    """The input's agent, else the ended run's."""
    kind: Literal["stream", "generate"]
    """``generate`` when the input came from a ``generate`` request."""
    reply_to: str
    """Where the input's request wanted its replies."""
    options: dict[str, Any] = field(default_factory=dict)
    """A queued turn's own options; a leftover delivery continues with the ended run's."""


def next_run(waiting: WaitingInput, ended_agent_id: str, ended_options: Mapping[str, object] | None, *,
             replies_topic: str, make_id: Callable[[], str] = lambda: new_id("run")) -> NextRun:
    """The run started for ``waiting`` when the thread's run ended (the signal becomes its input;
    a leftover delivery becomes a wake)."""
    opts = dict(waiting.options)
    run_id = opts.pop("run_id", None) or make_id()
    kind = opts.pop("kind", None)
    reply_to = opts.pop("reply_to", None)
    options = opts if waiting.mode == "queue" else dict(ended_options or {})
    return NextRun(run_id=run_id, agent_id=waiting.agent_id or ended_agent_id,
                   kind="generate" if kind == "generate" else "stream",
                   reply_to=reply_to or replies_topic, options=options)
