"""Code in the agents module passes call-level processors, tool hooks and
``prepare_step`` as objects; they travel as references to the agents module and the worker uses
them (decision 73)."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.e2e.agents import evals
from threadline.client import ThreadlineClient
from threadline.errors import ConfigurationError
from threadline.testing import model_script as ms


async def test_objects_given_to_a_call_in_process_reach_the_worker(services, settings, model, cluster):
    thread = f"th-obj-{uuid.uuid4().hex[:8]}"
    await model.aqueue([ms.tool_calls(ms.tool_call("tool_b", {}, id="call-b")), ms.text("done")],
                       model="threadline-called")
    in_process = settings.model_copy(update={"agents_module": "tests.e2e.agents"})
    async with ThreadlineClient(in_process) as tl:
        result = await tl.agent("called").generate("go", {
            "memory": {"resource": "res-obj", "thread": thread}, "inputProcessors": [evals.tag_call],
            "hooks": evals.call_hooks, "prepareStep": evals.call_prepare_step})
        with pytest.raises(ConfigurationError, match="module level in the agents module"):
            await tl.agent("called").generate("go", {"memory": {"resource": "res-obj", "thread": thread},
                                                     "prepareStep": lambda **_: {}})
    assert result.text == "done"
    first, second = (r["body"] for r in (await model.arequests(model="threadline-called"))[-2:])
    assert [t["function"]["name"] for t in first["tools"]] == ["tool_b"]  # prepare_step's active tools
    assert {"role": "system", "content": "This run was tagged by a call-level processor object."} in first["messages"]
    (tool_msg,) = [m for m in second["messages"] if m["role"] == "tool"]
    assert json.loads(tool_msg["content"]) == {"by": "call hook", "tool": "tool_b"}  # the call's hook answered
