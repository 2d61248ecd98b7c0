"""Durable sub-agents. ``sub-lead`` has the sub-agent ``helper`` (the tool
``agent-helper``); the helper calls the counted side effect of the crash tests, then answers.
Each step of a run asks its own fake model queue (``PerStepModel``): the lead's thread is the
test's, the helper's is ``<lead thread>.agent-helper.<tool call id>``."""

from __future__ import annotations

from threadline.runtime import Agent, create_tool

from .crashes import EffectInput, PerStepModel, chaos_effect

helper = Agent(id="sub-helper", description="Does one counted piece of work and reports.",
               model="openai/threadline-sub-helper",
               tools=[create_tool(id="chaos_effect", description="a counted side effect", input_schema=EffectInput,
                                  execute=chaos_effect)],
               input_processors=[PerStepModel("subh")])

lead = Agent(id="sub-lead", model="openai/threadline-sub-lead", agents={"helper": helper},
             input_processors=[PerStepModel("subl")])

agents = [lead, helper]
