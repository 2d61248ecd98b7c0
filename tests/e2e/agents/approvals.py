"""Agents of the tool-approval tests (decisions 225-227): the counted side effect of
:mod:`.crashes` as a tool that needs approval (``approver``), and the same tool without it, held
only by the call's ``require_tool_approval`` option (``approver-opt``); ``approver-add`` adds
two numbers once approved (no database: the client suites). Each step of a run asks its
own fake model queue (``threadline-appr-<thread>-s<N>``), so a test scripts every step."""

from __future__ import annotations

from threadline.runtime import Agent, create_tool

from .crashes import EffectInput, PerStepModel, chaos_effect

approved_effect = create_tool(id="approved_effect", description="a counted side effect a person approves",
                              input_schema=EffectInput, execute=chaos_effect, require_approval=True)
plain_effect = create_tool(id="plain_effect", description="a counted side effect", input_schema=EffectInput,
                           execute=chaos_effect)



def _add(input: dict[str, float]) -> float:
    return input["a"] + input["b"]


approved_add = create_tool(id="add", description="add two numbers once a person approves",
                           input_schema={"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                                         "required": ["a", "b"]}, execute=_add, require_approval=True)

agents = [
    Agent(id="approver", model="openai/threadline-approver", tools=[approved_effect],
          input_processors=[PerStepModel("appr")]),
    Agent(id="approver-opt", model="openai/threadline-approver-opt", tools=[plain_effect],
          input_processors=[PerStepModel("appr")]),
    Agent(id="approver-add", model="openai/threadline-approver-add", tools=[approved_add]),  # no database: the client suites
]
