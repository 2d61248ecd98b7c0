"""The agents of the parity scenarios, built from ``tests/parity/scenarios.json`` (the services
load this module: ``THREADLINE_AGENTS_MODULE=tests.parity.agents``).

Each scenario's agent is ``parity-<scenario id>`` on the fake model
``openai/threadline-parity-<scenario id>`` (a sub-agent ``<key>``: ``parity-<scenario id>-<key>`` on
``openai/threadline-parity-<scenario id>-<key>``; the ``threadline-`` marker routes it to the fake server), so one
scenario's scripted replies never reach another's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.parity.catalogue import HOOKS, PROCESSORS, TOOLS
from threadline.runtime import Agent

TABLE = Path(__file__).with_name("scenarios.json")


def _processors(specs: list[dict[str, Any]] | None) -> list[Any]:
    return [PROCESSORS[s["kind"]](**s.get("args", {})) for s in specs or []]


def build(spec: dict[str, Any], agent_id: str) -> Agent:
    """One agent from a scenario's ``agent`` entry (its sub-agents under ``<agent_id>-<key>``)."""
    subs = {s["key"]: build(s, f"{agent_id}-{s['key']}") for s in spec.get("agents", [])}
    extra: dict[str, Any] = {}
    if "max_processor_retries" in spec:
        extra["max_processor_retries"] = spec["max_processor_retries"]
    if "max_retries" in spec:
        extra["max_retries"] = spec["max_retries"]
    if "notifications" in spec:
        extra["notifications"] = spec["notifications"]
    if "hooks" in spec:  # each entry one hook (or two) of the catalogue, merged
        extra["hooks"] = {k: f for h in spec["hooks"] for k, f in HOOKS[h["kind"]](**h.get("args", {})).items()}
    return Agent(id=agent_id, name=spec.get("key", "parity"),
                 description=spec.get("description", f"the {spec.get('key', 'parity')} agent"),
                 instructions=spec.get("instructions", ""), model=f"openai/threadline-{agent_id}",
                 tools=[TOOLS[n]() for n in spec.get("tools", [])],
                 input_processors=_processors(spec.get("input_processors")),
                 output_processors=_processors(spec.get("output_processors")),
                 error_processors=_processors(spec.get("error_processors")),
                 memory={"lastMessages": 40, **spec.get("memory", {})}, agents=subs or None, **extra)


def _all(table: dict[str, Any]) -> list[Agent]:
    out: list[Agent] = []

    def walk(agent: Agent) -> None:
        out.append(agent)
        for sub in agent.agents.values():
            walk(sub)

    for scenario in table["scenarios"]:
        walk(build(scenario["agent"], f"parity-{scenario['id']}"))
    return out


agents: list[Agent] = _all(json.loads(TABLE.read_text()))
"""Every scenario's agent and sub-agents."""
