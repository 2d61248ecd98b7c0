"""Editor overrides through the gateway (docs/gateway.md, "Editor overrides"): an agent's
instructions and tool descriptions overridden by a caller with the ``editor`` scope reach the
model at the agent's next run (the fake model server's request journal), a run already running
keeps what it started with, and what the agent's ``editor`` option locks is refused or stripped —
on save, and by the worker for an override stored before the code locked it."""

from __future__ import annotations

import uuid

import asyncpg

from tests.e2e.gateway_http import TENANT_A, collect, finished, thread_path

EDITOR = "/v1/agents/{}/editor"


def _thread() -> str:
    return f"ged-{uuid.uuid4().hex[:10]}"


def _system(request: dict) -> list[str]:
    return [m["content"] for m in request["body"]["messages"] if m["role"] == "system"]


def _description(request: dict, tool: str) -> str:
    return next(t["function"]["description"] for t in request["body"]["tools"] if t["function"]["name"] == tool)


async def _generate(http, agent: str) -> None:
    r = await http.post(f"{thread_path(TENANT_A, _thread())}/generate",
                        json={"message": "hi", "agent_id": agent, "timeout_s": 60})
    assert r.status_code == 200, r.text


async def test_overrides_reach_the_next_run_and_a_running_run_keeps_its_own(gateway, model):
    async with gateway.client(gateway.key_a) as plain, gateway.client(gateway.key_editor) as editor:
        assert (await plain.get(EDITOR.format("editor-open"))).status_code == 403  # no editor scope
        assert (await plain.put(EDITOR.format("editor-open"), json={"instructions": "x"})).status_code == 403
        shown = (await editor.get(EDITOR.format("editor-open"))).json()
        assert shown["code"] == {"instructions": "You are the code's prompt.", "tools": {"add": "add two numbers"}}
        assert shown["editor"] == {"instructions": True, "tools": {"description": True}}
        r = await editor.put(EDITOR.format("editor-open"), json={
            "version": shown["version"], "instructions": "You are EDITED.", "model": "openai/elsewhere", "name": "renamed",
            "tools": {"add": {"description": "sum two integers"}, "ghost": {"description": "no such tool"}}})
        assert r.status_code == 200, r.text
        saved = r.json()
        assert saved["overrides"] == {"instructions": "You are EDITED.", "tools": {"add": {"description": "sum two integers"}}}
        assert sorted(saved["stripped"]) == ["model", "name", "tools.ghost.description"]
        saved_tag = r.headers["ETag"]
        assert saved["name"] == "editor-open" and (await editor.get("/v1/agents/editor-open")).json()["name"] == "editor-open"

        # the next run: its model request carries the new system prompt and tool description
        model.queue({"text": "ok"}, model="threadline-editor-open")
        await _generate(plain, "editor-open")
        first = model.requests(model="threadline-editor-open")[-1]
        assert _system(first) == ["You are EDITED."] and _description(first, "add") == "sum two integers"
        assert first["body"]["model"].endswith("threadline-editor-open")  # the model stays the code's

        # a run streaming when the overrides change keeps the ones it started with, in its later steps
        model.queue([{"chunks": [f"w{i} " for i in range(10)], "chunk_delay": 0.1}, {"text": "done"}],
                    model="threadline-editor-open")
        path = thread_path(TENANT_A, _thread())
        await plain.post(f"{path}/messages", json={"message": "go", "agent_id": "editor-open"})
        changed: dict = {}

        async def act(_ev) -> None:
            if "put" not in changed and sum(e.data["type"] == "text-delta" for e in seen) >= 2:
                changed["put"] = await editor.put(EDITOR.format("editor-open"), json={"instructions": "SECOND"},
                                                  headers={"If-Match": saved_tag})
                changed["mid"] = (await plain.post(f"{path}/messages", json={
                    "message": "more", "agent_id": "editor-open", "if_active": {"behavior": "deliver"}})).json()

        seen: list = []

        def until(evs) -> bool:
            seen[:] = evs
            return finished()(evs)

        await collect(plain, f"{path}/events", params={"from": "beginning"}, until=until, on_event=act)
        assert changed["put"].status_code == 200 and changed["mid"]["action"] == "deliver"
        steps = model.requests(model="threadline-editor-open")[-2:]
        assert [_system(r) for r in steps] == [["You are EDITED."], ["You are EDITED."]]
        assert [_description(r, "add") for r in steps] == ["sum two integers"] * 2
        model.queue({"text": "ok"}, model="threadline-editor-open")
        await _generate(plain, "editor-open")
        latest = model.requests(model="threadline-editor-open")[-1]
        # instructions replaced; the description override was dropped by this save (a save replaces)
        assert _system(latest) == ["SECOND"] and _description(latest, "add") == "add two numbers"


async def test_locked_fields_are_refused_or_stripped(gateway, model, cluster):
    async with gateway.client(gateway.key_a) as plain, gateway.client(gateway.key_editor) as editor:
        r = await editor.put(EDITOR.format("editor-locked"), json={"instructions": "let me in"})
        assert r.status_code == 403 and r.json()["error"]["code"] == "editor_locked"
        assert (await editor.get(EDITOR.format("editor-locked"))).json()["editor"] == \
            {"instructions": False, "tools": {"description": False}}
        r = await editor.put(EDITOR.format("editor-partial"), headers={"If-Match": "*"}, json={
            "instructions": "hijacked", "tools": {"add": {"description": "partial sum"}}})
        assert r.status_code == 200 and r.json()["stripped"] == ["instructions"]
        assert r.json()["overrides"] == {"tools": {"add": {"description": "partial sum"}}}
        # an override stored before the code locked the agent (written here directly) is not applied
        conn = await asyncpg.connect(cluster.dsn)
        try:
            await conn.execute("INSERT INTO agent_overrides (agent_id, overrides) VALUES ('editor-locked', "
                               "'{\"instructions\": \"stale\", \"tools\": {\"add\": {\"description\": \"stale\"}}}') "
                               "ON CONFLICT (agent_id) DO UPDATE SET overrides = EXCLUDED.overrides")
        finally:
            await conn.close()
        model.queue({"text": "ok"}, model="threadline-editor-partial")
        model.queue({"text": "ok"}, model="threadline-editor-locked")
        await _generate(plain, "editor-partial")
        await _generate(plain, "editor-locked")
    partial = model.requests(model="threadline-editor-partial")[-1]
    assert _system(partial) == ["Partial prompt."] and _description(partial, "add") == "partial sum"
    locked = model.requests(model="threadline-editor-locked")[-1]
    assert _system(locked) == ["Locked prompt."] and _description(locked, "add") == "add two numbers"
