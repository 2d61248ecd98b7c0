"""The sweeper's pure decision: is a run stuck, and what drives it on?"""

from __future__ import annotations

from dataclasses import replace

import pytest

from threadline.orchestration.recovery import RunSnapshot, decide

BOUND = 60.0
STUCK = RunSnapshot(status="running", step=1, steps_done=1, idle_s=300.0, heartbeat_age_s=None, holds_lease=True,
                    outbox_pending=False, recoveries=0)


def act(run: RunSnapshot, **kw) -> str:
    return decide(run, stuck_after_s=BOUND, **kw).action


def test_a_step_in_flight_nowhere_is_rescheduled():
    d = decide(STUCK, stuck_after_s=BOUND)
    assert d.action == "reschedule"
    assert "step 1" in d.reason and "no step owner" in d.reason


def test_a_dead_owner_is_rescheduled_with_its_heartbeat_age_in_the_reason():
    d = decide(replace(STUCK, heartbeat_age_s=200.0), stuck_after_s=BOUND)
    assert d.action == "reschedule" and "200 s" in d.reason


@pytest.mark.parametrize("change", [
    {"idle_s": 59.0},                      # the row changed recently
    {"heartbeat_age_s": 3.0},              # a worker beats the step's heartbeat
    {"outbox_pending": True},              # a step task / result waits for the relay
    {"status": "finished", "holds_lease": False},   # over and released
    {"status": "aborted", "holds_lease": False},
])
def test_not_stuck(change):
    assert act(replace(STUCK, **change)) == "none"


def test_a_stored_step_whose_result_was_never_applied_is_redelivered():
    assert act(replace(STUCK, steps_done=2)) == "redeliver_result"


def test_a_run_ended_in_the_store_that_still_holds_its_lease_is_redelivered():
    run = replace(STUCK, status="finished", steps_done=2)
    d = decide(run, stuck_after_s=BOUND)
    assert d.action == "redeliver_result" and "finished" in d.reason


def test_after_max_recoveries_the_run_fails_with_the_reason():
    d = decide(replace(STUCK, recoveries=3), stuck_after_s=BOUND, max_recoveries=3)
    assert d.action == "fail" and "3 recoveries" in d.reason
    assert act(replace(STUCK, recoveries=2), max_recoveries=3) == "reschedule"


def test_running_without_the_lease_fails():
    d = decide(replace(STUCK, holds_lease=False), stuck_after_s=BOUND)
    assert d.action == "fail" and "lease" in d.reason


def test_inconsistent_counters_fail():
    assert act(replace(STUCK, step=1, steps_done=5)) == "fail"


def test_the_bound_is_the_setting():
    run = replace(STUCK, idle_s=20.0)
    assert decide(run, stuck_after_s=10.0).action == "reschedule"
    assert decide(run, stuck_after_s=30.0).action == "none"


def test_a_run_continued_past_a_lost_result_names_the_first_missing_step():
    # a worker continued the run past step 0, whose result was lost; the run then ended in the store
    d = decide(replace(STUCK, status="finished", steps_done=2, results_applied=0), stuck_after_s=BOUND)
    assert d.action == "redeliver_result" and "step 0 stored but its result was never applied" in d.reason
    assert "finished" in d.reason
    d = decide(replace(STUCK, step=2, steps_done=3, results_applied=1), stuck_after_s=BOUND)
    assert d.action == "redeliver_result" and "step 1 stored" in d.reason
