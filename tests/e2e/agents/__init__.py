"""Agents of the end-to-end tests, by concern (the services load this package as
``THREADLINE_AGENTS_MODULE=tests.e2e.agents``).

* :mod:`.basics` — plain agents: echo, the support example, signals, abort, fan-out, state.
* :mod:`.processing` — input/output processors: tripwires, filters, caches, prompt edits.
* :mod:`.retries` — retry budgets of output and error processors, errors inside the stream.
* :mod:`.tools` — tools, their hooks and gates, tool-written data parts, big results.
* :mod:`.notifications` — notification delivery policies and the inbox tool.
* :mod:`.providers` — model-level retries, fallback models, request edits of error processors.
* :mod:`.streams` — stream normalisation (B07–B09): stalls, mixed text and calls, usage shapes.
* :mod:`.crashes` — a model per (thread, step) and a counted side effect, for crash and chaos tests.
* :mod:`.hostile` — dirty text, blocking user code, a result that cannot be stored.
* :mod:`.history` — history integrity (B03, B04, B10, B12): scoped retries, stable ids, replays, aborts.
* :mod:`.outages` — B13/B15/B16/B17: duplicates, broker outages, new-thread subscribers, notification claims.
* :mod:`.gateway` — agents driven over HTTP (the gateway, Studio).
* :mod:`.options` — agent handles, send results, memory options, dynamic configuration.
* :mod:`.evals` — scorers, tool payload transforms, call-level objects in-process.
* :mod:`.workflows` — durable workflows (a counted side effect per workflow step).
* :mod:`.subagents` — sub-agents as durable child runs.
* :mod:`.approvals` — tools that wait for a person's approval.
* :mod:`.composition` — the durable-composition cases D09–D11: results with no JSON form, deadlines, sub-agent trees.

Each agent has its own fake model name (``openai/threadline-<name>``), so one test's scripted
answers never reach another agent. Processors record what they saw in their ``state`` (stored
with the run), which the tests read back.
"""

from __future__ import annotations

from threadline.runtime import Agent

from . import (
    approvals,
    basics,
    composition,
    crashes,
    evals,
    gateway,
    history,
    hostile,
    notifications,
    options,
    outages,
    processing,
    providers,
    retries,
    streams,
    subagents,
    tools,
    workflows,
)

agents: list[Agent] = [*basics.agents, *processing.agents, *retries.agents, *tools.agents,
                       *notifications.agents, *crashes.agents, *providers.agents, *hostile.agents,
                       *streams.agents, *history.agents, *outages.agents, *gateway.agents, *options.agents,
                       *evals.agents, *workflows.agents, *subagents.agents, *approvals.agents,
                       *composition.agents]
"""Every agent the services serve (ids are unique: the registry refuses duplicates)."""

processors = processing.named
"""Processors that call-level options name by id (``input_processors: ["shout"]``)."""

hooks = tools.hooks
"""Tool hooks that call-level options name (``hooks: "blocking"``)."""
