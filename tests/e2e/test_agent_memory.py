"""Memory options as Mastra's — ``last_messages`` (N or False), read-only memory,
memory off, per agent and per call (``memory.options``); thread title and metadata; the agent's
``metadata`` readable by clients."""

from __future__ import annotations

import uuid

import pytest

from tests.e2e.helpers import rows
from threadline.client import ThreadlineClient
from threadline.client.client import RequestFailed
from threadline.testing import model_script as ms

RES = "res-mem"


async def _thread_with_notes(support, notes: list[str]) -> str:
    """A new thread holding ``notes`` as stored user messages (persisted: no model call)."""
    thread = f"th-mem-{uuid.uuid4().hex[:8]}"
    for note in notes:
        sent = await support.send_message(note, {"resourceId": RES, "threadId": thread, "ifIdle": {"behavior": "persist"}})
        await sent.persisted
    return thread


async def _asked(model, name: str) -> list[str]:
    """The user messages of the model's last request."""
    return [m["content"] for m in (await model.arequests(model=name))[-1]["body"]["messages"] if m["role"] == "user"]


async def _stored(dsn: str, thread: str) -> int:
    return (await rows(dsn, "SELECT count(*) AS n FROM messages WHERE thread_id = $1", thread))[0]["n"]


@pytest.mark.parametrize(("agent", "asked", "stored"), [
    ("short-memory", ["n3", "n4", "q"], 6),           # last_messages=2: the last two, and the run is stored
    ("no-history", ["q"], 6),                         # lastMessages: False: nothing read, still stored
    ("read-only-memory", ["n1", "n2", "n3", "n4", "q"], 4),  # read, nothing stored
    ("memory-off", ["q"], 4),                         # memory=False: neither
])
async def test_agent_memory_options(services, settings, model, cluster, agent, asked, stored):
    await model.aqueue([ms.text("answer")], model=f"threadline-{agent}")
    async with ThreadlineClient(settings) as tl:
        support = tl.agent(agent)
        thread = await _thread_with_notes(support, ["n1", "n2", "n3", "n4"])
        result = await support.generate("q", {"memory": {"resource": RES, "thread": thread}})
    assert result.text == "answer"
    assert await _asked(model, f"threadline-{agent}") == asked
    assert await _stored(cluster.dsn, thread) == stored


async def test_call_level_memory_options_override_the_agents(services, settings, model, cluster):
    await model.aqueue([ms.text("a1"), ms.text("a2")], model="threadline-short-memory")
    async with ThreadlineClient(settings) as tl:
        support = tl.agent("short-memory")
        thread = await _thread_with_notes(support, ["n1", "n2", "n3"])
        memory = {"resource": RES, "thread": thread, "options": {"lastMessages": 3, "readOnly": True}}
        assert (await support.generate("q1", {"memory": memory})).text == "a1"
        assert await _asked(model, "threadline-short-memory") == ["n1", "n2", "n3", "q1"]
        assert await _stored(cluster.dsn, thread) == 3  # read-only for this call
        out = await support.stream("q2", {"memory": {"resource": RES, "thread": thread, "options": {"lastMessages": 1}}})
        assert await out.text(timeout_s=30) == "a2"
        assert await _asked(model, "threadline-short-memory") == ["n3", "q2"]
        with pytest.raises(RequestFailed) as err:
            await support.generate("q3", {"memory": {"resource": RES, "thread": thread,
                                                     "options": {"lastMessages": -1}}})
    assert err.value.code == "invalid_memory_options" and "last_messages" in err.value.reply.message
    assert await _stored(cluster.dsn, thread) == 5  # q2 and a2


async def test_agent_metadata_and_thread_rows_are_readable_by_clients(services, settings, model, cluster):
    thread = f"th-mem-{uuid.uuid4().hex[:8]}"
    await model.aqueue([ms.text("ok")], model="threadline-handles")
    async with ThreadlineClient(settings) as tl:
        handles = tl.agent("handles")
        assert await handles.get_metadata() == {"team": "support", "tier": 2}
        details = await handles.details()
        assert details["description"] == "drives the client-side handle tests" and not details["dynamic_metadata"]
        assert (await tl.agent("short-memory").details())["memory"] == {"lastMessages": 2, "readOnly": False,
                                                                          "enabled": True}
        assert (await tl.agent("memory-off").details())["memory"]["enabled"] is False
        with pytest.raises(LookupError):
            await tl.agent("no-such-agent").details()
        memory = {"resource": RES, "thread": {"id": thread, "title": "Billing", "metadata": {"category": "billing"}}}
        await handles.generate("hi", {"memory": memory})
        row = await tl.get_thread(resource_id=RES, thread_id=thread)
        assert row is not None and (row["title"], row["metadata"]) == ("Billing", {"category": "billing"})
        assert await tl.get_thread(resource_id="someone-else", thread_id=thread) is None
