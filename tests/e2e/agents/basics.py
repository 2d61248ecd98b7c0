"""Plain agents: an echo, the support example, and agents whose only job is to be driven by
signals, aborts, fan-out and replay tests (no processors of their own)."""

from __future__ import annotations

from threadline.examples.support import support_agent
from threadline.runtime import Agent


def _broken_instructions(request_context: object) -> str:
    raise RuntimeError("instructions exploded")


echo_agent = Agent(id="echo-agent", instructions="Repeat what the user says.", model="openai/threadline-echo")
plain = Agent(id="plain", model="openai/threadline-plain")  # chunk and memory shapes of an unprocessed run
broken = Agent(id="broken", model="openai/threadline-broken", instructions=_broken_instructions)
abortable = Agent(id="abortable", model="openai/threadline-abortable")  # a slow answer that gets aborted
abort_then_follow_up = Agent(id="abort-follow-ups", model="openai/threadline-abort-follow-ups")
signals = Agent(id="signals", model="openai/threadline-signals")  # messages and signals into busy and idle threads
fanout = Agent(id="fanout", model="openai/threadline-fanout")

agents = [echo_agent, support_agent, plain, broken, abortable, abort_then_follow_up, signals, fanout]
