"""Dynamic configuration — instructions, model, tools, default options, memory,
metadata and processor lists as (plain or async) functions of the request context, resolved on the
worker per run; ``request_context_schema`` refuses a bad context with a clear error reply."""

from __future__ import annotations

import uuid

import pytest

from tests.e2e.helpers import content
from threadline.client import ThreadlineClient
from threadline.client.client import RequestFailed
from threadline.testing import model_script as ms

RES = "res-dyn"


async def _thread(support) -> str:
    """A new thread holding two stored user notes (persisted: no model call)."""
    thread = f"th-dyn-{uuid.uuid4().hex[:8]}"
    for note in ("n1", "n2"):
        await (await support.send_message(note, {"resourceId": RES, "threadId": thread,
                                                 "ifIdle": {"behavior": "persist"}})).persisted
    return thread


async def test_every_option_follows_the_request_context(services, settings, model, cluster):
    await model.aqueue([ms.tool_calls(ms.tool_call("lookup", {})), ms.text("never asked")],
                       model="threadline-dynamic-pro")
    await model.aqueue([ms.text("quiet words")], model="threadline-dynamic-free")
    async with ThreadlineClient(settings) as tl:
        support = tl.agent("dynamic")
        thread = await _thread(support)
        pro = await support.stream("q", {"memory": {"resource": RES, "thread": thread},
                                         "requestContext": {"tier": "pro"}})
        pro_chunks = await pro.consume_stream(timeout_s=30)
        free = await support.stream("q2", {"memory": {"resource": RES, "thread": thread},
                                           "requestContext": {"tier": "free"}})
        assert await free.text(timeout_s=30) == "quiet words"  # no output processor for free
        details = await support.details()
    (pro_request,) = await model.arequests(model="threadline-dynamic-pro")  # max_steps 1: one model call
    body = pro_request["body"]
    assert body["messages"][0] == {"role": "system", "content": "You serve the pro tier."}
    assert [m["content"] for m in body["messages"] if m["role"] == "user"] == ["n2", "q"]  # lastMessages 1
    assert [t["function"]["name"] for t in body["tools"]] == ["lookup"]
    result = next(c for c in pro_chunks if c["type"] == "tool-result")["payload"]["result"]
    assert result == {"meta": {"tier": "pro"}}  # the hook saw the run's metadata
    assert content(pro_chunks)[-1] == ("finish", "tool-calls")
    (free_request,) = await model.arequests(model="threadline-dynamic-free")
    assert free_request["body"]["messages"][0]["content"] == "You serve the free tier."
    assert "tools" not in free_request["body"] or not free_request["body"]["tools"]
    assert [m["content"] for m in free_request["body"]["messages"] if m["role"] == "user"][:2] == ["n1", "n2"]
    assert details["dynamic_metadata"] is True and details["metadata"] == {}


async def test_an_async_output_processor_list_applies(services, settings, model, cluster):
    """The pro tier's output processors (an async function) upper-case the answer."""
    await model.aqueue([ms.text("loud words")], model="threadline-dynamic-pro")
    async with ThreadlineClient(settings) as tl:
        support = tl.agent("dynamic")
        out = await support.stream("q", {"memory": {"resource": RES, "thread": f"th-dyn-{uuid.uuid4().hex[:8]}"},
                                         "requestContext": {"tier": "pro"}})
        assert await out.text(timeout_s=30) == "LOUD WORDS"


@pytest.mark.parametrize(("context", "expected"), [
    (None, "'tier' is a required property"),
    ({"tier": "gold"}, "request_context.tier: 'gold' is not one of ['free', 'pro']"),
])
async def test_request_context_schema_refuses_a_bad_context(services, settings, model, cluster, context, expected):
    thread = f"th-dyn-{uuid.uuid4().hex[:8]}"
    options = {"memory": {"resource": RES, "thread": thread}}
    if context is not None:
        options["requestContext"] = context
    async with ThreadlineClient(settings) as tl:
        support = tl.agent("dynamic")
        with pytest.raises(RequestFailed) as err:
            await support.generate("q", options)
        sent = await support.send_message("hi", {"resourceId": RES, "threadId": thread,
                                                 "ifIdle": {"streamOptions": {"requestContext": context or {}}}})
        with pytest.raises(RequestFailed) as woke:
            await sent.accepted
    assert err.value.code == woke.value.code == "invalid_request_context"
    assert expected in err.value.reply.message and "agent dynamic" in err.value.reply.message
    assert await model.arequests(model="threadline-dynamic-free") == []
