"""docs/testing.md's example (an agent unit-tested with threadline.testing's doubles) runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def test_the_documented_example_runs_as_written():
    [block] = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    exec(compile(block, str(DOC), "exec"), {"__name__": "docs_testing"})  # as a reader would paste it


def test_a_call_beyond_the_script_and_an_unused_response_fail():
    import asyncio

    from threadline.runtime.model.model_outcome import ModelOutcome
    from threadline.testing import ScriptedModel, text_delta

    model = ScriptedModel([text_delta("a")], [text_delta("b")])

    async def drain() -> list[dict]:
        return [c async for c in model(outcome=ModelOutcome(), messages=[])]

    assert asyncio.run(drain()) == [text_delta("a")]
    with pytest.raises(AssertionError, match="1 scripted response"):
        model.assert_all_used()
    asyncio.run(drain())
    model.assert_all_used()
    with pytest.raises(AssertionError, match="call 3 has no scripted response"):
        model(outcome=ModelOutcome(), messages=[])
