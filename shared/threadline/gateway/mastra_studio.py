"""The routes Mastra Studio (``mastra studio``, decision 133) calls on a Mastra server beyond
``@mastra/client-js``'s agents and memory (:mod:`threadline.gateway.mastra_api`). Each answers
what ``@mastra/server`` answers when the feature is off or holds nothing: Threadline has no
login flow of Mastra's auth providers, no working memory, voice, MCP servers or workspaces, and
serves no workflows, processors, scorers, channels or model providers over this API, so these lists are
empty, never invented. Every route needs the caller to be authenticated as ``/v1`` does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from threadline.gateway.mastra_http import gw, mastra_errors
from threadline.gateway.mastra_http import json_response as _json
from threadline.store import queries

OFF_ANSWERS: dict[str, object] = {
    "/api/workflows": {},
    "/api/processors": {},
    "/api/scores/scorers": {},
    "/api/agents/providers": {"providers": []},
    "/api/workspaces": {"workspaces": []},
    "/api/mcp/v0/servers": {"servers": [], "total_count": 0, "next": None},
    "/api/system/packages": {"packages": [], "isDev": False, "cmsEnabled": False,
                             "liveKitConnectionRouteEnabled": False, "observabilityEnabled": False},
    "/api/agents/{agent_id}/voice/speakers": [],
    "/api/channels/platforms": [],
    "/api/editor/builder/settings": {"enabled": False, "modelPolicy": {"active": False}},
    "/api/editor/builder/models/available": {"providers": []},
}
"""``GET`` path → ``@mastra/server``'s answer when the feature is off or nothing is registered:
workflows, processors and scorers are records by id (the agents' tools are served by
:mod:`threadline.gateway.mastra_tools`); voice speakers a list (what a server without a voice provider answers)."""


def _off(answer: object) -> Callable[[Request], Awaitable[Response]]:
    async def off(request: Request) -> Response:
        gw(request).caller(request)
        return _json(answer)

    return mastra_errors(off)


@mastra_errors
async def auth_capabilities(request: Request) -> Response:
    """``GET /api/auth/capabilities``: ``{enabled: false, login: null}``, Mastra's answer without
    an auth provider (Studio shows no login). Asked before any key is known, so it needs none;
    the gateway's keys and tokens still apply to every other call."""
    return _json({"enabled": False, "login": None})


@mastra_errors
async def working_memory(request: Request) -> Response:
    """``GET /api/memory/threads/:threadId/working-memory``: Threadline keeps no working memory, so
    ``workingMemory`` and ``workingMemoryTemplate`` are ``null`` (``source: "thread"``), as Mastra
    answers for an agent without it; ``threadExists`` says whether the caller can see the thread."""
    caller = gw(request).caller(request)
    owner = await queries.thread_owner(gw(request).db, request.path_params["thread_id"])
    exists = owner is not None and caller.may_act_for(owner)
    return _json({"workingMemory": None, "source": "thread", "workingMemoryTemplate": None, "threadExists": exists})


ROUTES = [
    Route("/api/auth/capabilities", auth_capabilities, methods=["GET"]),
    Route("/api/memory/threads/{thread_id}/working-memory", working_memory, methods=["GET"]),
    *(Route(path, _off(answer), methods=["GET"]) for path, answer in OFF_ANSWERS.items()),
]
"""Studio's routes, registered before :data:`threadline.gateway.mastra_api.ROUTES` (so that
``/api/agents/providers`` is not taken for an agent's id)."""
