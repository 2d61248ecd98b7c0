"""Agents of the end-to-end tests (loaded by the services as ``tests.e2e.agents``)."""

from threadline.examples.support import support_agent
from threadline.runtime import Agent

echo_agent = Agent(id="echo-agent", instructions="Repeat what the user says.", model="openai/threadline-echo")
support = support_agent

agents = [echo_agent, support]
