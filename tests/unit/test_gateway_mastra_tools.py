"""The gateway's Mastra tool routes without a cluster (decision 155): the agents' tools listed
and run in the gateway's process from the agents module (this test module), Mastra's answers
for a good call, and the error cases — unknown tool or agent 404, a bad body 400 that says
why, a failing tool 500 with its message, no agents module 501, no credentials 401."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from starlette.testclient import TestClient

from threadline.gateway import mastra_api
from threadline.gateway.app import Gateway, make_app
from threadline.gateway.auth import AuthConfig, parse_api_keys
from threadline.runtime.agent import Agent
from threadline.runtime.tools import ToolContext, create_tool
from threadline.runtime.workflows import Workflow, create_step
from threadline.store import queries


class AddInput(BaseModel):
    a: int
    b: int


def _fail(_: AddInput) -> int:
    raise RuntimeError("the ledger is closed")


def _whoami(_: object, context: ToolContext) -> dict[str, Any]:
    return {"agent": context.agent_id, "run": context.run_id, "context": context.request_context}


ADD = create_tool(id="add", description="add two numbers", input_schema=AddInput, execute=lambda i: i.a + i.b)
tools_agent = Agent(id="tools-agent", model="openai/x", instructions="You add.",
                    tools=[ADD, create_tool(id="fail", description="fails", input_schema=AddInput, execute=_fail),
                           create_tool(id="whoami", description="its context", execute=_whoami)])
other_agent = Agent(id="other-agent", model="openai/x", instructions="Other.", tools=[],
                    workflows={"order": Workflow(id="order").then(create_step(id="s", execute=lambda _: {})).commit()})


class _Transport:
    def __init__(self, module: str | None) -> None:
        self.agents_module = module


class _Client:
    def __init__(self, module: str | None) -> None:
        self.transport = _Transport(module)


def _app(monkeypatch: pytest.MonkeyPatch, *, module: str | None = __name__, auth: AuthConfig | None = None) -> TestClient:
    async def read_agent(_: Any, agent_id: str) -> dict[str, Any] | None:
        return {"id": agent_id, "name": agent_id, "memory": {}} if agent_id.endswith("-agent") else None

    monkeypatch.setattr(queries, "read_agent", read_agent)
    gateway = Gateway(_Client(module), None, auth or AuthConfig(open=True))  # type: ignore[arg-type]  # stubs
    return TestClient(make_app(gateway, extra_routes=mastra_api.ROUTES))


def test_the_agents_tools_are_listed_and_described(monkeypatch: pytest.MonkeyPatch) -> None:
    http = _app(monkeypatch)
    listed = http.get("/api/tools").json()
    assert set(listed) == {"add", "fail", "whoami", "workflow-order"}
    assert listed["add"]["description"] == "add two numbers"
    assert '"a"' in listed["add"]["inputSchema"]
    assert http.get("/api/tools/add").json()["id"] == "add"
    assert http.get("/api/agents/tools-agent/tools/add").json()["id"] == "add"
    assert http.get("/api/tools/nope").status_code == 404
    assert http.get("/api/agents/other-agent/tools/add").json() == {"error": "Tool not found", "code": "not_found"}


def test_execute_answers_the_tools_output(monkeypatch: pytest.MonkeyPatch) -> None:
    http = _app(monkeypatch)
    assert http.post("/api/tools/add/execute", json={"data": {"a": 2, "b": 3}}).json() == 5
    assert http.post("/api/agents/tools-agent/tools/add/execute", json={"data": {"a": 40, "b": 2}}).json() == 42
    seen = http.post("/api/tools/whoami/execute?runId=run-7", json={"data": {}, "requestContext": {"tier": "gold"}})
    assert seen.json() == {"agent": "tools-agent", "run": "run-7", "context": {"tier": "gold"}}


def test_execute_error_cases(monkeypatch: pytest.MonkeyPatch) -> None:
    http = _app(monkeypatch)
    unknown = http.post("/api/tools/nope/execute", json={"data": {}})
    assert unknown.status_code == 404 and unknown.json()["error"] == "Tool not found"
    assert http.post("/api/agents/nobody/tools/add/execute", json={"data": {}}).json()["error"] == "Agent not found"
    assert http.post("/api/agents/other-agent/tools/add/execute", json={"data": {}}).status_code == 404
    missing = http.post("/api/tools/add/execute", json={"input": {"a": 1}})
    assert missing.status_code == 400 and "data is required" in missing.json()["error"]
    wrong = http.post("/api/tools/add/execute", json={"data": {"a": "two"}})
    assert wrong.status_code == 400 and "invalid arguments for tool add" in wrong.json()["error"]
    assert http.post("/api/tools/add/execute", content=b"[1]").status_code == 400
    assert http.post("/api/tools/add/execute", json={"data": {}, "requestContext": [1]}).status_code == 400
    workflow = http.post("/api/agents/other-agent/tools/workflow-order/execute", json={"data": {}})
    assert workflow.status_code == 400 and "inside a run" in workflow.json()["error"]
    failed = http.post("/api/tools/fail/execute", json={"data": {"a": 1, "b": 1}})
    assert failed.status_code == 500
    assert failed.json() == {"error": "the ledger is closed", "code": "tool_error"}


def test_without_the_agents_module_tools_are_not_served(monkeypatch: pytest.MonkeyPatch) -> None:
    http = _app(monkeypatch, module=None)
    assert http.get("/api/tools").json() == {}
    off = http.post("/api/tools/add/execute", json={"data": {"a": 1, "b": 1}})
    assert off.status_code == 501 and "THREADLINE_AGENTS_MODULE" in off.json()["error"]


def test_tools_need_the_callers_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    http = _app(monkeypatch, auth=AuthConfig(keys=parse_api_keys('{"k-1": ["user-1"]}')))
    assert http.post("/api/tools/add/execute", json={"data": {"a": 1, "b": 1}}).status_code == 401
    assert http.get("/api/tools").status_code == 401
    assert http.post("/api/tools/add/execute", json={"data": {"a": 1, "b": 1}},
                     headers={"Authorization": "Bearer k-1"}).json() == 2
