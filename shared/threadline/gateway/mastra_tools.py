"""Mastra's tool routes on the gateway (decisions 132 and 155): ``GET /api/tools``,
``GET /api/tools/:toolId``, ``GET /api/agents/:agentId/tools/:toolId`` and the two ``execute``
routes. The tools are the agents' own, from the agents module the gateway is configured with
(``THREADLINE_AGENTS_MODULE``); an ``execute`` runs the tool in the gateway's process, as
``@mastra/server`` runs it in the server's: validated ``data`` in, the tool's output out, without
a run, the agent's tool hooks or a stream (decision 155). Authentication is the other ``/api``
routes'; a tool names no resource.

Answers: the tool's output (any JSON value); 400 ``{error}`` for a body without an object
``data``, arguments the tool's schema refuses, or a workflow tool (it runs step by step inside a
run); 404 for an unknown tool or agent; 500 with the tool's error message when it raises; 501
when the gateway cannot import the agents module.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from threadline.gateway import mastra_shapes as shapes
from threadline.gateway.mastra_http import body_of, gw, mastra_errors
from threadline.gateway.mastra_http import json_response as _json
from threadline.gateway.state import ApiError, Gateway
from threadline.ids import new_id
from threadline.logging import get_logger
from threadline.runtime.tools import Tool, ToolContext
from threadline.store import queries

if TYPE_CHECKING:
    from collections.abc import Mapping

    from threadline.runtime.agent import Agent

log = get_logger(__name__)

_loaded: dict[str, dict[str, Agent] | None] = {}


async def code_agents(gateway: Gateway) -> dict[str, Agent] | None:
    """The agents of the gateway's agents module by id, imported once per process; ``None``
    when no module is configured or it cannot be imported."""
    name = getattr(gateway.client.transport, "agents_module", None)
    if not name:
        return None
    if name not in _loaded:
        from threadline.runtime.registry import load_agents

        try:
            _loaded[name] = await asyncio.to_thread(load_agents, name)
        except Exception as exc:  # noqa: BLE001 - any import failure leaves the tools unserved, said in a 501
            log.warning("agents module not importable: tools not served", error=str(exc)[:200])
            _loaded[name] = None
    return _loaded[name]


def serialized(tool: Tool) -> dict[str, Any]:
    """Mastra's serialised tool (``{id, description, inputSchema}``, the schema as JSON text)."""
    return shapes.tool_shape(tool.id, tool.description, tool.parameters())


def find_tool(agents: Mapping[str, Agent], tool_id: str, agent_id: str | None = None) -> Tool | None:
    """The tool ``tool_id`` of ``agent_id`` (of the first agent that has it when ``None``)."""
    chosen = [agents[agent_id]] if agent_id is not None and agent_id in agents else [] if agent_id else agents.values()
    return next((a.tools[tool_id] for a in chosen if tool_id in a.tools), None)


def is_workflow(agents: Mapping[str, Agent], tool_id: str) -> bool:
    """Whether ``tool_id`` is a workflow's tool (``workflow-<key>``) of any agent."""
    return any(tool_id in a.workflow_tools for a in agents.values())


class _NoStream:
    """``context.writer`` of a tool run outside a run: there is no stream, its chunks are dropped
    (Mastra's server passes no writer either)."""

    async def custom(self, chunk: Mapping[str, object], options: Mapping[str, object] | None = None) -> None:
        return None


@dataclass(frozen=True)
class ExecuteBody:
    """An ``execute`` body: ``{data, requestContext?, runId?}``."""

    data: Any
    request_context: dict[str, object]
    run_id: str


def execute_body(body: Mapping[str, Any], run_id: str | None) -> ExecuteBody:
    """Read an ``execute`` body. Raises :class:`ShapeError` without an object ``data``, or when
    ``requestContext`` is not an object."""
    if not isinstance(body.get("data"), dict):
        raise shapes.ShapeError("data is required: the tool's input as a JSON object")
    context = body.get("requestContext") or {}
    if not isinstance(context, dict):
        raise shapes.ShapeError("requestContext must be an object")
    given = body.get("runId") or run_id
    return ExecuteBody(body["data"], context, given if isinstance(given, str) else "")


async def execute(tool: Tool, body: ExecuteBody, *, agent_id: str) -> Any:
    """Run ``tool`` once on ``body.data``; its JSON-ready output. Raises :class:`ShapeError` for
    arguments its schema refuses, :class:`ApiError` 500 with the tool's message when it raises."""
    call_id = new_id("call")
    context = ToolContext(tool_call_id=call_id, run_id=body.run_id, thread_id="", resource_id="",
                          agent_id=agent_id, step=0, idempotency_key=f"{body.run_id or 'api'}:{call_id}",
                          writer=_NoStream(), request_context=body.request_context)
    try:
        tool.parse(body.data)
    except ValueError as exc:
        raise shapes.ShapeError(str(exc)) from None
    try:
        return await tool.run(body.data, context)
    except Exception as exc:  # noqa: BLE001 - a tool's own failure is its answer, as Mastra's handleError gives it
        log.info("tool executed through the API failed", tool=tool.id, error=str(exc)[:200])
        raise ApiError(500, "tool_error", str(exc) or type(exc).__name__) from None


async def _agents(request: Request) -> dict[str, Agent]:
    gateway = gw(request)
    gateway.caller(request)
    agents = await code_agents(gateway)
    if agents is None:
        raise ApiError(501, "not_supported", "tools are served only when the gateway can import the agents module "
                                             "(THREADLINE_AGENTS_MODULE)")
    return agents


async def _served_agent(request: Request, agents: Mapping[str, Agent]) -> str:
    agent_id = str(request.path_params["agent_id"])
    if agent_id not in agents or await queries.read_agent(gw(request).db, agent_id) is None:
        raise ApiError(404, "not_found", "Agent not found")
    return agent_id


def _tool(agents: Mapping[str, Agent], tool_id: str, agent_id: str | None = None) -> Tool:
    found = find_tool(agents, tool_id, agent_id)
    if found is None:
        raise ApiError(404, "not_found", "Tool not found")
    return found


@mastra_errors
async def list_tools(request: Request) -> Response:
    """``{toolId: serialised tool}`` of every agent's tools (``{}`` without the agents module)."""
    gw(request).caller(request)
    agents = await code_agents(gw(request)) or {}
    out: dict[str, Any] = {}
    for agent in agents.values():
        for tool_id, tool in agent.tools.items():
            out.setdefault(tool_id, serialized(tool))
    return _json(out)


@mastra_errors
async def get_tool(request: Request) -> Response:
    return _json(serialized(_tool(await _agents(request), request.path_params["tool_id"])))


@mastra_errors
async def get_agent_tool(request: Request) -> Response:
    agents = await _agents(request)
    agent_id = await _served_agent(request, agents)
    return _json(serialized(_tool(agents, request.path_params["tool_id"], agent_id)))


async def _execute(request: Request, agents: Mapping[str, Agent], agent_id: str | None) -> Response:
    tool_id = str(request.path_params["tool_id"])
    tool = _tool(agents, tool_id, agent_id)
    if is_workflow(agents, tool_id):
        raise shapes.ShapeError("Tool is not executable: a workflow runs step by step inside a run")
    body = execute_body(await body_of(request), request.query_params.get("runId"))
    owner = agent_id or next(a for a in agents.values() if tool_id in a.tools).id
    return _json(await execute(tool, body, agent_id=owner))


@mastra_errors
async def execute_tool(request: Request) -> Response:
    """``POST /api/tools/:toolId/execute``: the first agent's tool of that id, run once."""
    return await _execute(request, await _agents(request), None)


@mastra_errors
async def execute_agent_tool(request: Request) -> Response:
    """``POST /api/agents/:agentId/tools/:toolId/execute``: the agent's tool, run once."""
    agents = await _agents(request)
    return await _execute(request, agents, await _served_agent(request, agents))


ROUTES = [
    Route("/api/tools", list_tools, methods=["GET"]),
    Route("/api/tools/{tool_id}", get_tool, methods=["GET"]),
    Route("/api/tools/{tool_id}/execute", execute_tool, methods=["POST"]),
    Route("/api/agents/{agent_id}/tools/{tool_id}", get_agent_tool, methods=["GET"]),
    Route("/api/agents/{agent_id}/tools/{tool_id}/execute", execute_agent_tool, methods=["POST"]),
]
"""The tool routes of :data:`threadline.gateway.mastra_api.ROUTES`."""
