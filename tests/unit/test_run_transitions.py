"""Every run transition of the orchestrator through the pure functions
(``threadline.orchestration.runs``): start, continue, every way a run ends, stale and duplicate
events, and which run takes the thread over."""

from __future__ import annotations

from dataclasses import asdict, replace

import pytest

from threadline.events import StartRun, StepResult
from threadline.orchestration.runs import (
    Announce,
    AnnounceStart,
    AnnounceStored,
    ClaimNext,
    Defer,
    EndRun,
    Ignore,
    NextRun,
    RunRow,
    SavePlan,
    ScheduleStep,
    WaitingInput,
    next_run,
    on_start_run,
    on_step_result,
    plan_save,
    unannounced_start,
)

pytestmark = pytest.mark.unit

RUN = RunRow(run_id="run-1", resource_id="res", thread_id="th", agent_id="agent-a", status="running", epoch=3,
             step=0, steps_done=0, attempt=1, kind="stream", request_id="req-1", reply_to="replies-x")


def _start(**kw: object) -> StartRun:
    return StartRun(**{"run_id": "run-1", "resource_id": "res", "thread_id": "th", "epoch": 3, **kw})


def _result(outcome: str, **kw: object) -> StepResult:
    return StepResult(**{"run_id": "run-1", "resource_id": "res", "thread_id": "th", "step": 0, "attempt": 1,
                         "epoch": 3, "outcome": outcome, **kw})


# --- start_run

def test_start_schedules_step_zero_and_announces_the_thread_active() -> None:
    assert on_start_run(RUN, _start()) == ScheduleStep(step=0, attempt=1, lifecycle=("thread_active", "run_started"))


def test_start_after_a_handover_does_not_announce_the_thread_active_again() -> None:
    assert on_start_run(RUN, _start(handover=True)) == ScheduleStep(step=0, attempt=1, lifecycle=("run_started",))


def test_start_keeps_the_runs_attempt() -> None:
    move = on_start_run(replace(RUN, attempt=2), _start())
    assert isinstance(move, ScheduleStep) and move.attempt == 2


@pytest.mark.parametrize("run", [None, replace(RUN, status="aborted"), replace(RUN, status="finished"),
                                 replace(RUN, epoch=4), replace(RUN, steps_done=1)],
                         ids=["missing", "aborted", "finished", "other-epoch", "already-stepping"])
def test_start_of_a_run_that_cannot_start_is_ignored(run: RunRow | None) -> None:
    assert isinstance(on_start_run(run, _start()), Ignore)


# --- step_result

def test_continue_schedules_the_next_step() -> None:
    running = replace(RUN, step=2, steps_done=3)
    assert on_step_result(running, _result("continue", step=2)) == ScheduleStep(
        step=3, attempt=1, lifecycle=("step_finished",), finished_step=2)


@pytest.mark.parametrize(("outcome", "terminal"), [("finished", "run_finished"), ("failed", "run_failed"),
                                                   ("tripwire", "run_tripwire"), ("aborted", "run_aborted")])
def test_every_terminal_outcome_ends_the_run(outcome: str, terminal: str) -> None:
    assert on_step_result(RUN, _result(outcome)) == EndRun(finished_step=0, terminal=terminal, reply_result=False)


def test_a_generate_run_is_answered_with_its_result_when_it_ends() -> None:
    generate = replace(RUN, kind="generate")
    assert on_step_result(generate, _result("finished")) == EndRun(0, "run_finished", reply_result=True)
    assert on_step_result(replace(generate, request_id=None), _result("finished")) == EndRun(0, "run_finished", False)


@pytest.mark.parametrize("run", [None, replace(RUN, epoch=2), replace(RUN, status="aborted")],
                         ids=["missing", "stale-epoch", "aborted"])
@pytest.mark.parametrize("outcome", ["continue", "finished"])
def test_step_result_of_a_gone_or_aborted_run_is_ignored(run: RunRow | None, outcome: str) -> None:
    assert isinstance(on_step_result(run, _result(outcome)), Ignore)


# --- the worker continues the run (docs/decisions.md 31-33)

def _stored(step: int = 2) -> RunRow:
    return RunRow.stored_by_worker(run_id="run-1", resource_id="res", thread_id="th", agent_id="agent-a", epoch=3,
                                   step=step, attempt=1)


def test_the_worker_claims_the_next_step_exactly_when_the_orchestrator_would_schedule_it() -> None:
    plan = plan_save(_stored(), _result("continue", step=2))
    assert plan.claim == ClaimNext(step=3, attempt=1)
    assert on_step_result(_stored(), _result("continue", step=2)) == ScheduleStep(
        step=3, attempt=1, lifecycle=("step_finished",), finished_step=2)
    for outcome in ("finished", "failed", "tripwire", "aborted", "suspended"):  # the orchestrator's moves
        assert plan_save(_stored(), _result(outcome, step=2)) == SavePlan()
    assert plan_save(replace(_stored(), status="aborted"), _result("continue", step=2)) == SavePlan()
    assert plan_save(_stored(), _result("continue", step=2, epoch=4)) == SavePlan()  # a stale claim


def test_the_worker_announces_what_the_orchestrator_would_only_announce_on_the_row_it_leaves() -> None:
    """The plan's announcement is the orchestrator's answer on the row as the claim leaves it, every
    earlier result applied (the guard the statement checks): ``Announce`` of the stored step, the
    run's start first while it is unannounced."""
    plan = plan_save(_stored(), _result("continue", step=2))
    assert plan.announce == AnnounceStored(applied=2, finished_step=2, start=("thread_active", "run_started"))
    left = replace(_stored(), step=3, steps_done=3, continued_from=2, results_applied=2)
    assert on_step_result(left, _result("continue", step=2)) == Announce(finished_step=2)
    assert unannounced_start(replace(left, start_announced=False)) == plan.announce.start
    assert unannounced_start(left) == ()  # start_announced true on the row: the step's record only


def test_a_continued_step_is_only_announced_with_its_next_step_claimed_in_the_row() -> None:
    # the worker stored step 2 and claimed step 3 (continued_from 2); the orchestrator reads that row
    continued = replace(RUN, step=3, steps_done=3, continued_from=2, results_applied=2)
    assert on_step_result(continued, _result("continue", step=2)) == Announce(finished_step=2)
    # a later step of the same chain, read while the worker is already two steps further
    chain = replace(RUN, step=5, steps_done=5, continued_from=2, results_applied=3)
    assert on_step_result(chain, _result("continue", step=3)) == Announce(finished_step=3)
    # the chain's last step ends the run as always
    ended = replace(RUN, status="finished", step=3, steps_done=4, continued_from=2, results_applied=3)
    assert on_step_result(ended, _result("finished", step=3)) == EndRun(3, "run_finished", reply_result=False)


def test_without_a_continuation_in_the_row_the_orchestrator_schedules_the_next_step() -> None:
    # continued_from NULL: the run was not continued by a worker; the step guard makes a copy harmless
    assert isinstance(on_step_result(replace(RUN, step=2, steps_done=3, results_applied=2),
                                     _result("continue", step=2)), ScheduleStep)
    # the chain broke after step 3 (stored, not continued): step 4 comes from the orchestrator
    broke = replace(RUN, step=3, steps_done=4, continued_from=2, results_applied=3)
    assert on_step_result(broke, _result("continue", step=3)) == ScheduleStep(
        step=4, attempt=1, lifecycle=("step_finished",), finished_step=3)


def test_a_result_after_a_lost_one_is_deferred_and_an_applied_one_ignored() -> None:
    ahead = replace(RUN, status="finished", step=1, steps_done=2, continued_from=0, results_applied=0)
    assert isinstance(on_step_result(ahead, _result("finished", step=1)), Defer)
    applied = replace(RUN, step=2, steps_done=2, continued_from=0, results_applied=2)
    assert isinstance(on_step_result(applied, _result("continue", step=1)), Ignore)


# --- hand-over: the run that takes the thread when one ends

def test_a_queued_turn_keeps_its_run_id_its_options_and_its_reply_topic() -> None:
    waiting = WaitingInput(mode="queue", agent_id="agent-b", request_id="req-2",
                           options={"run_id": "run-q", "kind": "generate", "reply_to": "mine", "max_steps": 2})
    assert next_run(waiting, "agent-a", {"max_steps": 9}, replies_topic="replies") == NextRun(
        run_id="run-q", agent_id="agent-b", kind="generate", reply_to="mine", options={"max_steps": 2})


def test_a_leftover_delivery_continues_with_the_ended_runs_options() -> None:
    waiting = WaitingInput(mode="deliver", agent_id=None, request_id="req-3", options={"kind": "send_message"})
    assert next_run(waiting, "agent-a", {"max_steps": 9}, replies_topic="replies",
                    make_id=lambda: "run-new") == NextRun(run_id="run-new", agent_id="agent-a", kind="stream",
                                                          reply_to="replies", options={"max_steps": 9})


# --- ingress starts the run (decisions 34-35)

FRESH = replace(RUN, start_announced=False)


def _created() -> RunRow:
    return RunRow.created(run_id="run-1", resource_id="res", thread_id="th", agent_id="agent-a", epoch=3,
                          kind="stream", request_id="req-1", reply_to="replies-x")


def test_the_run_ingress_creates_is_a_fresh_run_whose_start_is_unannounced() -> None:
    assert _created() == FRESH


def test_ingress_schedules_step_zero_by_the_orchestrators_rule() -> None:
    assert on_start_run(_created(), _start()) == on_start_run(RUN, _start())
    assert on_start_run(_created(), _start(handover=True)) == on_start_run(RUN, _start(handover=True))


@pytest.mark.parametrize("run", [replace(FRESH, status="aborted"), replace(FRESH, epoch=4),
                                 replace(FRESH, steps_done=1)], ids=["aborted", "other-epoch", "already-stepping"])
def test_the_rule_leaves_a_run_it_would_not_start_alone(run: RunRow) -> None:
    assert not isinstance(on_start_run(run, _start()), ScheduleStep)


def test_a_scheduled_start_is_only_announced_never_scheduled_again() -> None:
    assert on_start_run(FRESH, _start(scheduled=True)) == AnnounceStart(lifecycle=("thread_active", "run_started"))


@pytest.mark.parametrize("run", [replace(FRESH, status="finished", steps_done=1), replace(FRESH, steps_done=1),
                                 replace(FRESH, status="aborted")], ids=["finished", "stepping", "aborted"])
def test_a_scheduled_start_overtaken_by_the_run_is_still_announced_once(run: RunRow) -> None:
    assert isinstance(on_start_run(run, _start(scheduled=True)), AnnounceStart)
    assert isinstance(on_start_run(replace(run, start_announced=True), _start(scheduled=True)), Ignore)


def test_a_scheduled_start_of_another_epoch_or_a_missing_run_is_ignored() -> None:
    assert isinstance(on_start_run(replace(FRESH, epoch=4), _start(scheduled=True)), Ignore)
    assert isinstance(on_start_run(None, _start(scheduled=True)), Ignore)


def test_whatever_the_orchestrator_does_first_on_an_unannounced_run_announces_its_start() -> None:
    assert unannounced_start(FRESH) == ("thread_active", "run_started")
    assert unannounced_start(RUN) == ()


def test_the_row_view_reads_the_start_announced_column() -> None:
    row = asdict(FRESH)
    assert RunRow.of(row).start_announced is False
    del row["start_announced"]
    assert RunRow.of(row).start_announced is True  # rows from before 0014 were started by the orchestrator
