"""A parent run's ``RunOutput`` carries its sub-agents' nested ``tool-output`` chunks (decision
78): their own runId/seq/attempt, so neither the parent's dead attempts nor the resume point mix
with the child's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from threadline.client.run_output import RunOutput
from threadline.events.chunks import nested_chunk

pytestmark = pytest.mark.unit

TARGET = {"run_id": "p", "resource_id": "r", "thread_id": "t", "tool_call_id": "k", "tool_name": "agent-h"}


def _c(run: str, seq: int, kind: str, step: int = 0, attempt: int = 1, **payload: Any) -> dict[str, Any]:
    return {"runId": run, "seq": seq, "step": step, "attempt": attempt, "type": kind, "payload": payload}


class Source:
    def __init__(self, chunks: list[dict[str, Any]]) -> None:
        self.chunks = chunks

    @property
    def stream(self) -> AsyncIterator[dict[str, Any]]:
        async def gen() -> AsyncIterator[dict[str, Any]]:
            for c in self.chunks:
                yield c
        return gen()

    async def unsubscribe(self) -> None:
        return None


async def test_nested_chunks_are_part_of_the_parent_stream_and_checked_as_the_child() -> None:
    child = [_c("c", 0, "start"), _c("c", 1, "text-delta", text="dead"),
             {**_c("c", 1_000_000, "attempt-discarded", attempt=2), "payload": {"step": 0, "attempt": 1}},
             _c("c", 1_000_001, "text-delta", attempt=2, text="kept"), _c("c", 1_000_002, "finish", attempt=2)]
    parent = [_c("p", 0, "start"), _c("p", 1, "tool-call"), _c("p", 2, "step-finish")]
    other = nested_chunk(_c("x", 0, "start"), {**TARGET, "run_id": "someone-else"})
    thread = [*parent, *(nested_chunk(c, TARGET) for c in child), other,
              _c("p", 3, "tool-result", step=1), _c("p", 4, "text-delta", step=1, text="answer"),
              _c("p", 5, "finish", step=1)]
    seen: list[dict[str, int]] = []

    async def open_sub(from_ms: int, after: dict[str, int]) -> Source:
        seen.append(after)
        return Source(thread)

    out = RunOutput("p", open_sub, 0)
    kept = await out.consume_stream()
    nested = [c["payload"]["output"] for c in kept if c["type"] == "tool-output"]
    # the child's dead attempt 1 of its step 0 dropped (its start too), by the child's own steps;
    # the parent's step 0 (attempt 1) is untouched
    assert [c["type"] for c in nested] == ["attempt-discarded", "text-delta", "finish"]
    assert nested[1]["payload"]["text"] == "kept"
    assert [c["type"] for c in kept if c["runId"] == "p"][:3] == ["start", "tool-call", "step-finish"]
    assert await out.text() == "answer"  # the parent's text only
    assert all(c["payload"].get("parentRunId") == "p" for c in kept if c["type"] == "tool-output")
    assert seen == [{}]
