"""Agents of the hostile-input tests: text PostgreSQL or UTF-8 cannot hold (decision 18), user code
that blocks the worker's event loop, and a step whose result cannot be stored after its finish."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from threadline.runtime import Agent, Processor, create_tool

DIRTY = "nul\x00 lone\ud800 low\udfff"
"""What the dirty tool returns inside its result: U+0000 and two lone surrogate halves."""


class DirtyInput(BaseModel):
    text: str = ""


async def dirty(input: DirtyInput, context: Any) -> dict[str, Any]:
    return {"echo": input.text, "dirty": DIRTY, "nested": [{"k\x00": DIRTY}]}


dirty_text = Agent(id="dirty-text", model="openai/threadline-dirty-text", default_options={"max_steps": 3},
                   tools=[create_tool(id="dirty", description="returns dirty text", input_schema=DirtyInput,
                                      execute=dirty)])


class NapInput(BaseModel):
    seconds: float = 5.0


def nap(input: NapInput) -> dict[str, Any]:
    """A plain ``def`` that blocks its thread (as blocking I/O would)."""
    time.sleep(input.seconds)
    return {"slept": input.seconds}


class WatchInput(BaseModel):
    marker: str
    seconds: float = 20.0


def watchful(input: WatchInput, context: Any) -> dict[str, Any]:
    """A plain ``def`` that polls the abort signal and writes how it ended to ``marker``."""
    started = time.monotonic()
    aborted = context.abort_signal.wait(input.seconds)
    Path(input.marker).write_text(f"{'aborted' if aborted else 'timeout'} {time.monotonic() - started:.2f}")
    return {"aborted": aborted}


sleepy = Agent(id="sleepy-tools", model="openai/threadline-sleepy", default_options={"max_steps": 3},
               tools=[create_tool(id="nap", description="sleeps", input_schema=NapInput, execute=nap),
                      create_tool(id="watchful", description="waits", input_schema=WatchInput, execute=watchful)])
chatty = Agent(id="chatty", model="openai/threadline-chatty")  # streams while another run's tool blocks


class Unstorable(Processor):
    """Leaves a value in its state that cannot be stored (a set is not JSON): the run's last step
    streams its ``finish`` and then fails to store its result."""

    id = "unstorable"

    async def process_output_result(self, *, state: Any, **_: Any) -> None:
        state["bad"] = {1, 2}


unstorable = Agent(id="unstorable", model="openai/threadline-unstorable", output_processors=[Unstorable()])

agents = [dirty_text, sleepy, chatty, unstorable]
