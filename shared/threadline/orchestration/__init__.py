"""Threadline's decisions as pure functions: how a request is routed on a thread
(:mod:`~threadline.orchestration.routing`), how a run moves from step to step and ends
(:mod:`~threadline.orchestration.runs`), what to do with a run nothing drives any more
(:mod:`~threadline.orchestration.recovery`) and a sub-agent's child run
(:mod:`~threadline.orchestration.children`). They read values and answer small typed values; the
use cases in :mod:`threadline.flows` do the reading and the writing around them."""

from threadline.orchestration.routing import (
    Deliver,
    Discard,
    Inbound,
    NextVersion,
    Persist,
    Queue,
    Route,
    Skip,
    ThreadState,
    Wake,
    decide_route,
    decide_state,
)
from threadline.orchestration.runs import (
    AbortActive,
    Announce,
    AnnounceStart,
    AnnounceStored,
    ClaimNext,
    Defer,
    EndRun,
    Ignore,
    NextRun,
    NothingToAbort,
    RunRow,
    SavePlan,
    ScheduleStep,
    next_run,
    on_abort,
    on_start_run,
    on_step_result,
    plan_save,
    unannounced_start,
)

__all__ = ["AbortActive", "Announce", "AnnounceStart", "AnnounceStored", "ClaimNext", "Defer", "Deliver", "Discard",
           "EndRun", "Ignore", "Inbound", "NextRun", "NextVersion", "NothingToAbort", "Persist", "Queue", "Route",
           "RunRow", "SavePlan", "ScheduleStep", "Skip", "ThreadState", "Wake", "decide_route", "decide_state",
           "next_run", "on_abort", "on_start_run", "on_step_result", "plan_save", "unannounced_start"]
