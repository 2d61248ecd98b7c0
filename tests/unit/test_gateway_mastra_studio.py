"""What Mastra Studio needs of the gateway beyond ``@mastra/client-js`` (decisions 133 and 134),
without a cluster: credentialed CORS, the routes of features Threadline does not serve answered
as Mastra answers them off, the model interface version in an agent's details, stored user
messages dated when they were sent, and a running run's answer kept out of memory until the run
ends."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.unit.test_gateway_mastra import ORIGIN, _app
from threadline.gateway import mastra_shapes as shapes
from threadline.gateway.auth import AuthConfig, parse_api_keys
from threadline.store import queries


def test_cors_allows_credentialed_calls_from_a_configured_origin(monkeypatch: pytest.MonkeyPatch) -> None:
    http = _app(monkeypatch, cors=(ORIGIN,))
    asked = {"Origin": ORIGIN, "Access-Control-Request-Method": "GET"}
    # Studio's fetch uses credentials: "include"; without this header the browser drops every answer
    assert http.options("/api/agents", headers=asked).headers["access-control-allow-credentials"] == "true"
    assert http.get("/api/auth/capabilities", headers={"Origin": ORIGIN}).headers[
        "access-control-allow-origin"] == ORIGIN


def test_studio_routes_answer_as_mastra_does_with_the_feature_off(monkeypatch: pytest.MonkeyPatch) -> None:
    http = _app(monkeypatch)
    assert http.get("/api/auth/capabilities").json() == {"enabled": False, "login": None}
    for path in ("/api/workflows", "/api/tools", "/api/processors", "/api/scores/scorers"):
        assert http.get(path, params={"requestContext": "e30="}).json() == {}, path
    assert http.get("/api/agents/providers").json() == {"providers": []}  # not taken for an agent's id
    assert http.get("/api/mcp/v0/servers").json() == {"servers": [], "total_count": 0, "next": None}
    assert http.get("/api/agents/helper/voice/speakers").json() == []
    assert http.get("/api/editor/builder/settings").json() == {"enabled": False, "modelPolicy": {"active": False}}
    assert http.get("/api/system/packages").json()["packages"] == []
    memory = http.get("/api/memory/threads/t-mine/working-memory", params={"agentId": "helper"}).json()
    assert memory == {"workingMemory": None, "source": "thread", "workingMemoryTemplate": None, "threadExists": True}
    assert http.get("/api/memory/threads/t-nope/working-memory").json()["threadExists"] is False


def test_studio_routes_need_credentials_when_the_gateway_has_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = parse_api_keys('{"k-1": ["user-1"]}')
    http = _app(monkeypatch, auth=AuthConfig(keys=keys))
    assert http.get("/api/workflows").status_code == 401
    assert http.get("/api/workflows", headers={"Authorization": "Bearer k-1"}).json() == {}
    other = http.get("/api/memory/threads/t-other/working-memory", headers={"Authorization": "Bearer k-1"})
    assert other.json()["threadExists"] is False  # another resource's thread: as a missing one
    assert http.get("/api/auth/capabilities").status_code == 200  # asked before Studio knows any key


def test_agent_details_name_the_model_interface_version() -> None:
    out = shapes.agent_shape({"id": "a", "name": "A"}, None, None)
    assert out["modelVersion"] == "v3"  # Studio sends a message into a running run only for v2/v3 models


def test_a_stored_user_message_is_dated_when_it_was_sent() -> None:
    stored = datetime(2026, 12, 6, 7, 51, 25, tzinfo=UTC)
    signal = {"id": "sig_1", "type": "user", "createdAt": "2026-12-06T07:51:15.633799Z"}
    user = {"id": "sig_1", "role": "user", "created_at": stored,
            "content": {"format": 2, "parts": [{"type": "text", "text": "hi"}], "metadata": {"signal": signal}}}
    answer = {"id": "msg_1", "role": "assistant", "created_at": stored, "content": {"format": 2, "parts": []}}
    shaped = [shapes.message_shape(r, thread_id="t", resource_id="u") for r in (user, answer)]
    assert [m["createdAt"] for m in shaped] == ["2026-12-06T07:51:15.633799Z", stored.isoformat()]
    assert shaped[0]["createdAt"] < shaped[1]["createdAt"].replace("+00:00", "Z")


STORED = datetime(2026, 12, 6, 9, 39, 9, tzinfo=UTC)
EARLIER = [{"id": "sig_0", "run_id": "run-0", "role": "user"}, {"id": "msg_0", "run_id": "run-0", "role": "assistant"}]
TURN = [{"id": "sig_1", "run_id": "run-1", "role": "user"},
        {"id": "msg_1", "run_id": "run-1", "role": "assistant"},  # step 1's tool call, stored before step 2 streams
        {"id": "tool_1", "run_id": "run-1", "role": "tool"}]


def test_a_running_runs_answer_is_held_back_until_the_run_ends() -> None:
    rows = [*EARLIER, *TURN]
    assert [r["id"] for r in shapes.settled_messages(rows, "run-1")] == ["sig_0", "msg_0", "sig_1"]
    assert [r["id"] for r in shapes.settled_messages(rows, None)] == [r["id"] for r in rows]  # idle: all
    # another run running (its answer held), this one's stored answer served
    assert [r["id"] for r in shapes.settled_messages(rows, "run-0")] == ["sig_0", "sig_1", "msg_1", "tool_1"]


def _messages_app(monkeypatch: pytest.MonkeyPatch, running: str | None) -> Any:
    async def active_run(_: Any, *, resource_id: str, thread_id: str) -> str | None:
        assert (resource_id, thread_id) == ("user-1", "t-mine")
        return running

    async def page_messages(_: Any, *, resource_id: str, thread_id: str, offset: int, limit: int,
                            descending: bool = False) -> tuple[list[dict[str, Any]], int]:
        rows = [{**r, "type": "v2", "created_at": STORED, "content": {"format": 2, "parts": []}} for r in EARLIER + TURN]
        rows = rows[::-1] if descending else rows
        return rows[offset:offset + limit], len(rows)

    http = _app(monkeypatch)
    monkeypatch.setattr(queries, "active_run", active_run)
    monkeypatch.setattr(queries, "page_messages", page_messages)
    return http


def test_memory_serves_a_running_runs_answer_only_once_the_run_has_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    # Studio refetches the thread while the answer streams and merges by id: the stored half-answer
    # (id = the stream's messageId) would take the streamed text out of the message under way
    asked = {"agentId": "helper", "perPage": "40", "orderBy": '{"field":"createdAt","direction":"DESC"}'}
    mid_run = _messages_app(monkeypatch, "run-1").get("/api/memory/threads/t-mine/messages", params=asked).json()
    assert [m["id"] for m in mid_run["messages"]] == ["sig_1", "msg_0", "sig_0"]
    assert (mid_run["total"], mid_run["hasMore"]) == (3, False)
    ended = _messages_app(monkeypatch, None).get("/api/memory/threads/t-mine/messages", params=asked).json()
    assert [m["id"] for m in ended["messages"]] == ["tool_1", "msg_1", "sig_1", "msg_0", "sig_0"]
    assert ended["total"] == 5
    first = _messages_app(monkeypatch, "run-1").get("/api/memory/threads/t-mine/messages",
                                                    params={**asked, "perPage": "2"}).json()
    assert ([m["id"] for m in first["messages"]], first["total"], first["hasMore"]) == ([], 3, True)
