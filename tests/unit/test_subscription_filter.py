"""The subscriber's filter: duplicates by (runId, seq) and dead attempts are dropped."""

from threadline.client.subscription import ThreadSubscription


def _c(seq, attempt, type_="text-delta", step=0, dead=None):
    payload = {} if dead is None else {"step": step, "attempt": dead}
    return {"runId": "r", "step": step, "attempt": attempt, "seq": seq, "type": type_, "payload": payload}


def test_a_marker_declares_that_attempt_and_every_earlier_one_of_the_step_dead():
    sub = ThreadSubscription("unused:1", "t")
    shown = [c for c in [
        _c(0, 1), _c(1, 1),
        # attempt 2's marker was lost with the broker; attempt 3 declares attempt 2 dead
        _c(2_000_000, 3, "attempt-discarded", dead=2),
        _c(2, 1),  # a late record of attempt 1 (a zombie): dead too
        _c(1_000_005, 2),  # a late record of attempt 2
        _c(2_000_001, 3), _c(2_000_001, 3),  # a duplicate
        _c(2_000_002, 3, "finish"),
    ] if sub.accept(c)]
    assert [(c["seq"], c["attempt"]) for c in shown] == [(0, 1), (1, 1), (2_000_000, 3), (2_000_001, 3), (2_000_002, 3)]


def test_a_marker_of_one_step_leaves_other_steps_alone():
    sub = ThreadSubscription("unused:1", "t")
    assert sub.accept(_c(10, 1, step=1))
    assert sub.accept(_c(1_000_010, 2, "attempt-discarded", step=2, dead=1))
    assert sub.accept(_c(1_000_011, 1, step=3))


async def test_a_run_whose_finish_was_delivered_is_not_reported_active_while_its_lease_lags():
    holder: list[str | None] = ["r"]

    async def lease() -> str | None:
        return holder[0]

    sub = ThreadSubscription("unused:1", "t", on_active=lease)
    assert sub.accept(_c(0, 1))
    assert await sub.active_run_id() == "r"
    assert sub.accept(_c(1, 1, "finish"))
    assert await sub.active_run_id() is None  # the orchestrator has not released the lease yet
    holder[0] = "r2"  # the next run took the thread
    assert await sub.active_run_id() == "r2"
    holder[0] = None
    assert await sub.active_run_id() is None
