"""Every row of the routing table in docs/signals.md, through the pure decision
(``threadline.orchestration.routing``): the request and the thread's state in, the action out."""

from __future__ import annotations

import pytest

from threadline.events import (
    Generate,
    QueueMessage,
    SendMessage,
    SendSignal,
    SendStateSignal,
    SignalInput,
    StateInput,
    Stream,
)
from threadline.orchestration.routing import (
    Deliver,
    Discard,
    Inbound,
    Lane,
    NextVersion,
    Persist,
    Queue,
    Skip,
    ThreadState,
    Wake,
    decide_route,
    decide_state,
)
from threadline.orchestration.runs import AbortActive, NothingToAbort, RunRow, abort_target, on_abort

pytestmark = pytest.mark.unit

IDLE = ThreadState(active=False)
ACTIVE = ThreadState(active=True, run_id="run-1", run_agent_id="agent-a")
THREAD = {"agent_id": "agent-a", "resource_id": "res", "thread_id": "th"}


def _send(kind: str, **kw: object) -> Inbound:
    common = {"event_id": "e1", **THREAD, **kw}
    if kind == "send_message":
        return Inbound.of(SendMessage(message="hi", **common))
    if kind == "send_signal":
        return Inbound.of(SendSignal(signal={"type": "reactive", "contents": "ping"}, **common))
    return Inbound.of(SendStateSignal(state={"id": "lane", "cache_key": "k"}, **common))


SIGNALLING = ["send_message", "send_signal", "send_state_signal"]


# --- send_message / send_signal / send_state_signal, thread active: if_active.behavior

@pytest.mark.parametrize("kind", SIGNALLING)
def test_active_default_delivers_into_the_run(kind: str) -> None:
    assert decide_route(_send(kind), ACTIVE) == Deliver("run-1", {})


@pytest.mark.parametrize("kind", SIGNALLING)
def test_a_delivery_to_a_run_that_ended_before_its_lease_was_released_is_the_next_runs_turn(kind: str) -> None:
    """The run's last step is stored (a subscriber may have its finish) and the orchestrator has not
    released the thread yet: nothing would read a delivery; the request names the run that answers it."""
    ended = ThreadState(active=True, run_id="run-1", run_agent_id="agent-a", run_ended=True)
    assert decide_route(_send(kind), ended) == Queue({})
    assert decide_route(_send(kind, if_active={"behavior": "deliver", "attributes": {"a": 1}}), ended) == \
        Queue({"a": 1})
    assert decide_route(_send(kind, if_active={"behavior": "persist"}), ended) == \
        Persist(idle=False, attributes={}, run_id="run-1")


@pytest.mark.parametrize("kind", SIGNALLING)
def test_active_persist_stores_without_a_run(kind: str) -> None:
    """It names the active run, whose input is stored first (the thread is ordered by creation)."""
    route = decide_route(_send(kind, if_active={"behavior": "persist"}), ACTIVE)
    assert route == Persist(idle=False, attributes={}, run_id="run-1")


@pytest.mark.parametrize("kind", SIGNALLING)
def test_active_discard(kind: str) -> None:
    assert decide_route(_send(kind, if_active={"behavior": "discard"}), ACTIVE) == Discard({})


# --- the same requests on an idle thread: if_idle.behavior

@pytest.mark.parametrize("kind", SIGNALLING)
def test_idle_default_wakes(kind: str) -> None:
    assert decide_route(_send(kind), IDLE) == Wake({})


@pytest.mark.parametrize("kind", SIGNALLING)
def test_idle_persist_shows_a_run_without_a_model_call(kind: str) -> None:
    assert decide_route(_send(kind, if_idle={"behavior": "persist"}), IDLE) == Persist(idle=True, attributes={})


@pytest.mark.parametrize("kind", SIGNALLING)
def test_idle_discard(kind: str) -> None:
    assert decide_route(_send(kind, if_idle={"behavior": "discard"}), IDLE) == Discard({})


def test_idle_wake_takes_the_stream_options_as_run_options() -> None:
    req = _send("send_message", if_idle={"stream_options": {"maxSteps": 3}})
    assert decide_route(req, IDLE) == Wake({})
    assert dict(req.run_options) == {"max_steps": 3}


# --- attributes of the branch taken are merged over the message's

def test_attributes_of_the_branch_taken() -> None:
    req = _send("send_message", if_active={"attributes": {"delivery": "while-active"}},
                if_idle={"attributes": {"delivery": "new-message"}})
    assert decide_route(req, ACTIVE) == Deliver("run-1", {"delivery": "while-active"})
    assert decide_route(req, IDLE) == Wake({"delivery": "new-message"})


# --- queue_message

def test_queue_message_on_an_active_thread_queues_a_run_of_its_own() -> None:
    req = Inbound.of(QueueMessage(event_id="e1", message="later", **THREAD))
    assert decide_route(req, ACTIVE) == Queue({})


@pytest.mark.parametrize("behavior", ["wake", "persist", "discard"])
def test_queue_message_on_an_idle_thread_starts_a_run_whatever_if_idle_says(behavior: str) -> None:
    req = Inbound.of(QueueMessage(event_id="e1", message="now", if_idle={"behavior": behavior,
                                                                         "attributes": {"a": 1}}, **THREAD))
    assert decide_route(req, IDLE) == Wake({"a": 1})


# --- stream / generate

@pytest.mark.parametrize("model", [Stream, Generate])
def test_stream_and_generate_queue_behind_an_active_run(model: type[Stream]) -> None:
    req = Inbound.of(model(event_id="e1", message="go", **THREAD))
    assert decide_route(req, ACTIVE) == Queue({})


@pytest.mark.parametrize("model", [Stream, Generate])
def test_stream_and_generate_start_a_run_on_an_idle_thread(model: type[Stream]) -> None:
    req = Inbound.of(model(event_id="e1", message="go", options={"maxSteps": 2}, **THREAD))
    assert decide_route(req, IDLE) == Wake({})
    assert req.kind == model.model_fields["type"].default and dict(req.run_options) == {"max_steps": 2}


# --- a message for another agent than the active run's

@pytest.mark.parametrize("kind", SIGNALLING)
def test_another_agents_message_is_queued_behind_the_run(kind: str) -> None:
    other = ThreadState(active=True, run_id="run-1", run_agent_id="agent-b")
    assert decide_route(_send(kind), other) == Queue({})
    # its if_active behaviour does not apply: the other agent's run is never interrupted
    assert decide_route(_send(kind, if_active={"behavior": "discard"}), other) == Queue({})


def test_naming_the_active_run_delivers_whatever_its_agent() -> None:
    other = ThreadState(active=True, run_id="run-1", run_agent_id="agent-b")
    assert decide_route(_send("send_message", run_id="run-1"), other) == Deliver("run-1", {})
    assert decide_route(_send("send_message", run_id="run-9"), other) == Queue({})


# --- abort

def _run(status: str = "running", *, step: int = 0, steps_done: int = 0, kind: str = "stream") -> RunRow:
    return RunRow(run_id="run-1", resource_id="res", thread_id="th", agent_id="agent-a", status=status, epoch=1,
                  step=step, steps_done=steps_done, attempt=1, kind=kind, request_id="req", reply_to=None)


def test_abort_ends_the_active_run() -> None:
    assert abort_target("run-1", None) == "run-1"
    assert on_abort(_run()) == AbortActive(emit_terminal=False, reply_result=False)


def test_abort_of_an_idle_thread_has_nothing_to_abort() -> None:
    assert abort_target(None, None) is None
    assert on_abort(None) == NothingToAbort()


def test_abort_naming_another_run_than_the_active_one_aborts_nothing() -> None:
    assert abort_target("run-1", "run-2") is None
    assert abort_target(None, "run-2") is None


def test_abort_of_a_run_that_already_ended_aborts_nothing() -> None:
    assert on_abort(_run("finished")) == NothingToAbort()


def test_abort_between_steps_writes_the_terminal_chunks_itself() -> None:
    # no step outstanding (the last one stored its result): the orchestrator ends the stream
    assert on_abort(_run(step=1, steps_done=2, kind="generate")) == AbortActive(emit_terminal=True,
                                                                               reply_result=True)


# --- the inbox's own signals route like send_signal

def test_inbox_signal_routes_like_send_signal() -> None:
    sig = SignalInput(type="notification", contents="deploy failed")
    req = Inbound.signal(sig, event_id="e1", reply_to=None, if_idle="persist", stream_options={"maxSteps": 1},
                         **THREAD)
    assert req.kind == "send_signal" and dict(req.run_options) == {"max_steps": 1}
    assert decide_route(req, ACTIVE) == Deliver("run-1", {})
    assert decide_route(req, IDLE) == Persist(idle=True, attributes={})


# --- state lanes: an unchanged value is skipped

def test_state_signal_first_value_is_version_one() -> None:
    st = StateInput(id="browser", cache_key="k1", value={"open": True})
    assert decide_state(st, thread_id="th", lane=None) == NextVersion(1, {
        "id": "browser", "threadId": "th", "cacheKey": "k1", "version": 1, "mode": "snapshot",
        "value": {"open": True}})


def test_state_signal_unchanged_is_skipped() -> None:
    st = StateInput(id="browser", cache_key="k1")
    assert decide_state(st, thread_id="th", lane=Lane("k1", "snapshot", 4)) == Skip()


def test_state_signal_new_key_or_mode_bumps_the_version() -> None:
    new_key = decide_state(StateInput(id="b", cache_key="k2"), thread_id="th", lane=Lane("k1", "snapshot", 4))
    assert isinstance(new_key, NextVersion) and new_key.version == 5
    delta = decide_state(StateInput(id="b", cache_key="k1", mode="delta", delta={"x": 1}), thread_id="th",
                         lane=Lane("k1", "snapshot", 4))
    assert isinstance(delta, NextVersion) and delta.version == 5 and delta.state["delta"] == {"x": 1}
    assert "value" not in delta.state
