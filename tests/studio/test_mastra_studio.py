"""Mastra Studio (``mastra studio`` of the ``mastra`` CLI 1.31.0, unchanged) on Threadline's
gateway in headless Chromium (decision 133): it lists the agents, chats with the demo's support
agent (the text streams in, whole in one message below the ``lookup_customer`` call, whose result
is shown; the thread's memory holds no half-made answer meanwhile, decision 150), reopens the
thread from memory in a fresh page, and sends a message into a running run, which the run takes
(``send-message`` answers ``deliver``). Screenshots are kept in ``.run/artifacts/mastra-studio-*.png``
(``mastra-studio-tool-call.png``: the chat with the tool call open).

Debian's ``chromium`` (``make install``) driven by Playwright; without the browser the test skips,
naming the reason."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from threadline.testing.model_script import ModelScript, text, tool_call, tool_calls

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / ".run" / "artifacts"
ANSWER = "Ada Lovelace is on the pro plan and has two open tickets right now."
SLOW = " ".join(f"word{i}" for i in range(60))

pytestmark = pytest.mark.timeout(240)


def _browser() -> str:
    found = subprocess.run(["bash", str(ROOT / "deploy" / "native" / "chromium.sh"), "path"], capture_output=True,
                           text=True)
    if found.returncode != 0:
        pytest.skip("no chromium (make install installs Debian's with apt-get; it needs root and apt-get)")
    return found.stdout.strip()


async def _shot(page: Any, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / f"mastra-studio-{name}.png"
    await page.screenshot(path=str(shot))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, ARTIFACTS / shot.name)
    print(f"screenshot: {ARTIFACTS / shot.name}")
    return shot


async def _memory_while_running(gateway_url: str, sent: list[dict[str, Any]]) -> list[tuple[bool, list[str]]]:
    """Polls the new thread from the send until its run has ended: for each look taken while the run
    still ran (its lease held after the look), whether ``/v1`` had stored an answer, and the roles
    the Mastra API served."""
    seen: list[tuple[bool, list[str]]] = []
    async with httpx.AsyncClient(base_url=gateway_url, timeout=10) as http:
        while not sent:
            await asyncio.sleep(0.05)
        thread, ran = f"/threads/{sent[0]['threadId']}", False
        while True:
            stored = await http.get(f"/v1/resources/support-agent{thread}/messages")
            served = await http.get(f"/api/memory{thread}/messages", params={"agentId": "support-agent"})
            active = await http.get(f"/v1/resources/support-agent{thread}/active-run")
            if all(r.status_code == 200 for r in (stored, served, active)):  # else: the thread is not made yet
                if active.json()["run_id"] is None and ran:
                    return seen
                if active.json()["run_id"] is not None:
                    ran = True
                    seen.append((any(m["role"] == "assistant" for m in stored.json()["messages"]),
                                 [m["role"] for m in served.json()["messages"]]))
            await asyncio.sleep(0.1)


async def test_mastra_studio_chats_with_a_threadline_agent(studio_url: str, gateway_url: str, model_server: Any,
                                                           tmp_path: Path) -> None:
    executable = _browser()
    playwright_api = pytest.importorskip("playwright.async_api", reason="the playwright package is not installed")
    model = ModelScript(model_server.url)
    model.reset()
    model.queue([tool_calls(tool_call("lookup_customer", {"customer_id": "C-1001"})), text(ANSWER, chunk_delay=0.15),
                 text(SLOW, chunk_delay=0.15), text("Second answer: noted.")])
    sent: list[dict[str, Any]] = []

    async def on_response(response: Any) -> None:
        if response.request.method == "POST" and response.url.endswith("/send-message"):
            sent.append({**orjson.loads(await response.body()), "threadId": response.request.post_data_json["threadId"]})

    async with playwright_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=executable, headless=True,
                                           args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
        context = await browser.new_context(viewport={"width": 1400, "height": 900})
        memory_seen: asyncio.Task[list[tuple[bool, list[str]]]] | None = None
        try:
            context.on("response", on_response)
            page = await context.new_page()
            # the agents list
            await page.goto(f"{studio_url}/agents")
            await page.get_by_text("Support Agent").first.wait_for(timeout=60_000)
            await _shot(page, tmp_path, "agents")
            # a chat: the tool call, then the answer as it streams
            await page.goto(f"{studio_url}/agents/support-agent/chat/new")
            box = page.get_by_placeholder("Enter your message...")
            await box.fill("Is C-1001 on a paid plan?")
            await box.press("Enter")
            memory_seen = asyncio.create_task(_memory_while_running(gateway_url, sent))
            await page.get_by_text("Ada Lovelace").first.wait_for(timeout=60_000)
            partial = await page.get_by_text(ANSWER).count()  # the words so far, not yet the whole answer
            await page.get_by_text(ANSWER).wait_for(timeout=60_000)  # the whole answer in one element
            assert partial == 0  # the text arrived in pieces
            # while the run ran with its tool step stored, the Mastra API's memory held no answer yet:
            # Studio merges what it fetches into the message it streams by id (decision 150)
            seen = await asyncio.wait_for(memory_seen, 60)
            assert any(stored for stored, _ in seen), seen  # looked after the tool step was stored
            assert all("assistant" not in served for stored, served in seen if stored), seen
            thread_url = page.url
            assert "/agents/support-agent/" in thread_url and not thread_url.endswith("/new")
            await page.get_by_text("Lookup customer").first.click()
            await page.get_by_text("open_tickets").first.wait_for(timeout=10_000)  # the tool's result
            shot = await _shot(page, tmp_path, "tool-call")
            assert "C-1001" in await page.content()  # the call's arguments
            asked = await page.get_by_text("Is C-1001 on a paid plan?").first.bounding_box()
            called = await page.get_by_text("Lookup customer").first.bounding_box()
            answered = await page.get_by_text(ANSWER).bounding_box()
            assert asked and called and answered
            assert asked["y"] < called["y"] < answered["y"]  # the question, then the tool call, then the answer
            # the thread again, from memory, in a fresh page
            again = await context.new_page()
            await again.goto(thread_url)
            await again.get_by_text(ANSWER).wait_for(timeout=60_000)
            await again.get_by_text("Is C-1001 on a paid plan?").wait_for(timeout=10_000)
            await again.get_by_text("Lookup customer").first.wait_for(timeout=10_000)
            await _shot(again, tmp_path, "reopened")
            # a message into a running run
            box = again.get_by_placeholder("Enter your message...")
            await box.fill("Tell me a long story.")
            await box.press("Enter")
            await again.get_by_text("word3 ").wait_for(timeout=60_000)
            await box.fill("And one more thing.")
            await box.press("Enter")
            await again.get_by_text("Second answer: noted.").wait_for(timeout=60_000)
            await again.get_by_text("And one more thing.").wait_for(timeout=10_000)
            await _shot(again, tmp_path, "mid-run")
        except Exception:
            for i, open_page in enumerate(context.pages):  # what the pages showed, for the log
                await _shot(open_page, tmp_path, f"failure-{i}")
            raise
        finally:
            if memory_seen is not None:
                memory_seen.cancel()
            await browser.close()
    assert [s.get("action") for s in sent] == ["wake", "wake", "deliver"], sent
    assert shot.stat().st_size > 20_000
