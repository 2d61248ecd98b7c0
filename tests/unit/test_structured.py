"""structuredOutput (threadline.runtime.model.structured): the request it makes, validation, bad schemas."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from threadline.errors import ModelCallError
from threadline.events.replies import RunResult
from threadline.runtime.model.structured import resolve

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


class Point(BaseModel):
    x: int
    y: int


def test_a_json_schema_becomes_response_format_and_validates() -> None:
    spec = resolve({"schema": SCHEMA, "name": "count", "strict": True})
    assert spec.response_format() == {"type": "json_schema",
                                      "json_schema": {"name": "count", "schema": SCHEMA, "strict": True}}
    assert spec.parse('{"n": 3}') == {"n": 3} and spec.parse('```json\n{"n": 4}\n```') == {"n": 4}
    with pytest.raises(ModelCallError, match=r"at n: 'x' is not of type 'integer'") as info:
        spec.parse('{"n": "x"}')
    assert info.value.kind == "structured_output" and not info.value.retryable
    with pytest.raises(ModelCallError, match="not JSON"):
        spec.parse("sorry, no JSON")
    assert resolve(SCHEMA).name == "response"  # the schema alone


def test_a_pydantic_model_gives_its_schema_and_validates_through_it() -> None:
    spec = resolve(Point)
    assert spec.name == "Point" and spec.schema["required"] == ["x", "y"]
    assert spec.parse('{"x": 1, "y": "2"}') == {"x": 1, "y": 2}
    with pytest.raises(ModelCallError, match="does not match Point"):
        spec.parse('{"x": 1}')


@pytest.mark.parametrize("bad", [{"schema": {"type": "no-such-type"}}, {"schema": "a string"}, {"schema": {}},
                                 {"schema": SCHEMA, "strict": "yes"}, 42])
def test_a_schema_that_is_not_json_schema_is_a_clear_error(bad) -> None:
    with pytest.raises(ModelCallError) as info:
        resolve(bad)
    assert info.value.kind == "structured_output" and str(info.value).startswith("structured output:")


def test_the_result_object_is_the_last_steps() -> None:
    result = RunResult(request_id="r", run_id="x", finish_reason="stop", steps=[{"text": "a"}, {"object": {"n": 1}}])
    assert result.object == {"n": 1}
    assert RunResult(request_id="r", run_id="x", finish_reason="stop").object is None
