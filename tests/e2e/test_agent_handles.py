"""``client.agent(id)`` with Mastra's Agent methods, and Mastra's return
shapes — the send result's created signal, ``accepted.output`` on a wake (the woken run's stream
only), ``active_run_id()`` asked of the thread's lease."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from tests.e2e.helpers import collect_run, rows, wait_idle
from threadline.client import RunOutput, ThreadlineClient
from threadline.client.client import RequestFailed
from threadline.events import SendMessage
from threadline.testing import model_script as ms

MODEL = "threadline-handles"


def _where() -> dict[str, str]:
    return {"resourceId": "res-h", "threadId": f"th-h-{uuid.uuid4().hex[:8]}"}


async def test_send_message_wake_gives_the_created_signal_and_the_runs_own_stream(services, settings, model, cluster):
    where = _where()
    await model.aqueue([ms.text("first answer"), ms.text("second answer")], model=MODEL)
    async with ThreadlineClient(settings) as tl:
        support = tl.agent("handles")
        sub = await support.subscribe_to_thread(where)
        result = await support.send_message(
            {"contents": "Can we simplify?", "attributes": {"name": "Devin"}, "metadata": {"ui": 1}},
            {**where, "ifIdle": {"attributes": {"delivery": "new-message"}, "streamOptions": {"maxSteps": 2}}})
        signal = result.signal
        assert signal is not None and signal.id.startswith("sig_")  # known before ingress answers
        assert (signal.type, signal.contents, signal.attributes) == ("user", "Can we simplify?", {"name": "Devin"})
        accepted = await result.accepted
        assert accepted.action == "wake" and accepted.signal_id == signal.id
        # once accepted: the stored signal (the ifIdle attributes merged in, ingress's createdAt)
        assert signal.attributes == {"name": "Devin", "delivery": "new-message"} and signal.tag_name == "user"
        assert isinstance(accepted.output, RunOutput) and accepted.output.run_id == accepted.run_id
        first = await accepted.output.consume_stream(timeout_s=30)
        assert await accepted.output.text() == "first answer"
        seen = await collect_run(sub)
        assert await wait_idle(cluster.dsn, where["threadId"])  # the lease is freed just after the finish
        # a second wake on the same thread: its output holds that run only, not the first one
        second = await (await support.send_message("again", where)).accepted
        assert second.action == "wake" and second.run_id != accepted.run_id
        texts = [t async for t in second.output.text_stream]
        await sub.unsubscribe()
    assert {c["runId"] for c in first} == {accepted.run_id} and first[-1]["type"] == "finish"
    assert [(c["seq"], c["type"]) for c in first] == [(c["seq"], c["type"]) for c in seen]  # the whole run, once
    assert "".join(texts) == "second answer"
    stored = await rows(cluster.dsn, "SELECT payload FROM signals WHERE id = $1", signal.id)
    assert stored[0]["payload"]["createdAt"] == signal.created_at
    assert stored[0]["payload"]["attributes"] == signal.attributes and stored[0]["payload"]["metadata"] == {"ui": 1}
    assert signal.to_dict()["contents"] == "Can we simplify?"
    request = (await model.arequests(model=MODEL))[0]["body"]["messages"]
    assert request[-1]["content"] == '<user name="Devin" delivery="new-message">Can we simplify?</user>'


async def test_active_run_id_asks_the_lease_and_deliver_names_the_run(services, settings, model, cluster):
    where = _where()
    await model.aqueue([{"chunks": [f"w{i} " for i in range(20)], "chunk_delay": 0.1}, ms.text("ok")], model=MODEL)
    async with ThreadlineClient(settings) as tl:
        support = tl.agent("handles")
        run = await (await support.send_message("start", where)).accepted
        async for chunk in run.output.stream:  # the run is under way
            if chunk["type"] == "text-delta":
                break
        late = await support.subscribe_to_thread(resource_id=where["resourceId"], thread_id=where["threadId"])
        assert late.seen_run_id() is None  # this subscriber has read nothing yet
        assert await late.active_run_id() == run.run_id  # the lease knows
        sent = await support.send_signal({"type": "reactive", "contents": "CI is red"}, where)
        delivered = await sent.accepted
        assert (delivered.action, delivered.run_id, delivered.output) == ("deliver", run.run_id, None)
        assert sent.signal is not None and sent.signal.tag_name == "system-reminder"
        await run.output.consume_stream(timeout_s=30)
        assert await wait_idle(cluster.dsn, where["threadId"])
        assert await late.active_run_id() is None
        await late.unsubscribe()
        other = await tl.subscribe_to_thread("res-other", where["threadId"])  # not its thread: no run
        assert await other.active_run_id() is None
        await other.unsubscribe()


async def test_persist_generate_stream_and_state_through_the_handle(services, settings, model, cluster):
    where = _where()
    await model.aqueue([ms.text("generated"), ms.text("streamed")], model=MODEL)
    async with ThreadlineClient(settings) as tl:
        support = tl.agent("handles")
        kept = await support.send_message("note", {**where, "ifIdle": {"behavior": "persist"}})
        accepted = await kept.accepted
        assert (accepted.action, accepted.output, accepted.signal_id) == ("persist", None, kept.signal.id)
        assert (await kept.persisted).signal_id == kept.signal.id
        memory = {"resource": where["resourceId"],
                  "thread": {"id": where["threadId"], "title": "Billing support", "metadata": {"category": "billing"}}}
        result = await support.generate("Continue.", {"memory": memory, "maxSteps": 1})
        assert result.text == "generated"
        output = await support.stream("More.", {"memory": {"resource": where["resourceId"],
                                                          "thread": where["threadId"]}})
        assert await output.text(timeout_s=30) == "streamed"
        assert await wait_idle(cluster.dsn, where["threadId"])
        state = {"id": "browser", "cacheKey": "k1", "contents": "3 tabs", "value": {"tabs": 3}}
        first = await support.send_state_signal(state, {**where, "ifIdle": {"behavior": "persist"}})
        assert (await first.accepted).action == "persist" and first.signal.type == "state"
        again = await support.send_state_signal(state, {**where, "ifIdle": {"behavior": "persist"}})
        assert (await again.accepted).type == "skipped"
        notified = await support.send_notification_signal(
            {"source": "github", "kind": "ci", "summary": "CI failed", "priority": "low"}, where)
        assert notified.results[0]["record"]["source"] == "github"
        with pytest.raises(TypeError, match="threadId"):
            await support.send_message("hi", {"resourceId": "res-h"})
    thread = await rows(cluster.dsn, "SELECT title, metadata FROM threads WHERE thread_id = $1", where["threadId"])
    assert (thread[0]["title"], thread[0]["metadata"]) == ("Billing support", {"category": "billing"})


async def test_a_signal_id_that_exists_is_refused(services, settings, model, cluster):
    where = _where()
    await model.aqueue([ms.text("one")], model=MODEL)
    async with ThreadlineClient(settings) as tl:
        first = await tl.agent("handles").send_message("one", where)
        await (await first.accepted).output.consume_stream(timeout_s=30)
        assert first.signal is not None
        reuse = SendMessage(agent_id="handles", resource_id="res-h", thread_id=f"th-h-{uuid.uuid4().hex[:8]}",
                            message="two", signal_id=first.signal.id)
        sent = await tl._send(reuse)
        with pytest.raises(RequestFailed) as err:
            await asyncio.wait_for(sent.accepted, 30)
    assert err.value.code == "signal_id_taken"
