"""Loading the agents module named by configuration (invariant 7)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from threadline.errors import ConfigurationError
from threadline.runtime.agent import Agent
from threadline.runtime.tools import ToolHooks


def load_agents(module_name: str) -> dict[str, Agent]:
    """Import ``module_name`` and collect its agents.

    The module may define ``agents`` (a list or ``{id: Agent}``); otherwise every module-level
    :class:`Agent` is taken.

    Raises:
        ConfigurationError: the module cannot be imported, defines no agent, or two agents share an id.
    """
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import agents module {module_name!r}: {exc}") from exc
    found: Any = getattr(module, "agents", None)
    if isinstance(found, dict):
        items = list(found.values())
    elif isinstance(found, list | tuple):
        items = list(found)
    else:
        items = [v for v in vars(module).values() if isinstance(v, Agent)]
    out: dict[str, Agent] = {}
    for agent in items:
        if not isinstance(agent, Agent):
            raise ConfigurationError(f"{module_name}.agents holds a {type(agent).__name__}, not an Agent")
        if agent.id in out and out[agent.id] is not agent:
            raise ConfigurationError(f"two agents share the id {agent.id!r}")
        out[agent.id] = agent
    subs = [sub for agent in out.values() for sub in agent.agents.values()]
    while subs:  # a static sub-agent is served too, listed or not (its child runs need it)
        sub = subs.pop()
        if not isinstance(sub, Agent):  # a sub-agent is served like any agent, so it must be one
            raise ConfigurationError(f"sub-agent {sub.id!r} is a {type(sub).__name__}, not an Agent")
        if sub.id not in out:
            out[sub.id] = sub
            subs.extend(sub.agents.values())
    if not out:
        raise ConfigurationError(f"agents module {module_name!r} defines no Agent")
    return out


@dataclass
class Catalogue:
    """What call-level options may name by id: processors and tool hooks.

    A request travels as JSON, so ``input_processors: ["pii"]`` or ``hooks: "audit"`` name
    objects defined in the agents module (``processors`` = list or dict, ``hooks`` = dict of
    :class:`ToolHooks`); the agents' own processors are included.
    """

    processors: dict[str, Any] = field(default_factory=dict)
    hooks: dict[str, ToolHooks] = field(default_factory=dict)
    module: str | None = None
    """The agents module: call-level references (``{"ref": "module:name"}``) resolve inside its
    package only (:mod:`threadline.runtime.refs`)."""


def load_catalogue(module_name: str, agents: dict[str, Agent]) -> Catalogue:
    """Collect the processors and hooks that call-level options can name."""
    module = importlib.import_module(module_name)
    cat = Catalogue(module=module_name)
    for agent in agents.values():
        for plist in (agent.input_processors, agent.output_processors, agent.error_processors):
            if isinstance(plist, list):
                for p in plist:
                    cat.processors.setdefault(p.id, p)
    found = getattr(module, "processors", None)
    items = found.values() if isinstance(found, dict) else (found or [])
    for p in items:
        cat.processors[p.id] = p
    for name, hooks in (getattr(module, "hooks", None) or {}).items():
        cat.hooks[name] = ToolHooks.of(hooks)
    return cat
