"""Structured output (docs/models.md, "Structured output"): a JSON Schema or a pydantic model per
call or per step becomes litellm's ``response_format`` (litellm turns it into each provider's
structured-output request, or a forced tool where the provider has none), and the final answer
is parsed and validated into ``object``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jsonschema
import orjson
from pydantic import BaseModel, ValidationError

from threadline.errors import ModelCallError
from threadline.events.json_types import JSONObject, JSONValue

KIND = "structured_output"
"""The error kind of an answer that does not validate, or of a schema that is not JSON Schema."""


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """A resolved ``structuredOutput`` option."""

    schema: JSONObject
    """The JSON Schema."""
    name: str
    """The schema's name in the provider request."""
    strict: bool | None
    """OpenAI's strict mode (``None``: the provider's default)."""
    model: type[BaseModel] | None = None
    """The pydantic model the schema came from (validation through it)."""

    def response_format(self) -> JSONObject:
        """litellm's ``response_format`` argument."""
        spec: JSONObject = {"name": self.name, "schema": self.schema}
        if self.strict is not None:
            spec["strict"] = self.strict
        return {"type": "json_schema", "json_schema": spec}

    def parse(self, text: str) -> JSONValue:
        """The validated object of the model's answer ``text`` (JSON-ready).

        Raises:
            ModelCallError: kind ``structured_output`` — not JSON, or not valid against the schema.
        """
        body = text.strip()
        if body.startswith("```"):  # some models fence their JSON
            body = body.strip("`").removeprefix("json").strip()
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise _error(f"the answer is not JSON ({exc}): {text[:200]!r}") from None
        if self.model is not None:
            try:
                return self.model.model_validate(value).model_dump(mode="json")
            except ValidationError as exc:
                raise _error(f"the answer does not match {self.name}: {exc.errors()[:3]}") from None
        errors = sorted(jsonschema.Draft202012Validator(self.schema).iter_errors(value), key=lambda e: list(e.path))
        if errors:
            where = "/".join(str(p) for p in errors[0].absolute_path) or "(root)"
            raise _error(f"the answer does not match the schema at {where}: {errors[0].message}")
        return value


def _error(message: str) -> ModelCallError:
    return ModelCallError(f"structured output: {message}", kind=KIND, retryable=False)


def resolve(option: Any) -> OutputSpec | None:
    """The ``structuredOutput`` option (``{"schema": ..., "name"?, "strict"?}``, or the schema
    itself: a JSON Schema dict or a pydantic model class) as an :class:`OutputSpec`.

    Raises:
        ModelCallError: kind ``structured_output`` when the schema is not a JSON Schema (a dict
            that fails the meta-schema, or another type), never anything else.
    """
    if option is None:
        return None
    wrapper = option if isinstance(option, dict) and "schema" in option else {"schema": option}
    schema = wrapper.get("schema")
    name = wrapper.get("name") or "response"
    strict = wrapper.get("strict")
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return OutputSpec(schema.model_json_schema(), wrapper.get("name") or schema.__name__, strict, schema)
    if not isinstance(schema, dict) or not schema:
        raise _error(f"the schema must be a JSON Schema object or a pydantic model, got {type(schema).__name__}")
    try:
        jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise _error(f"the schema is not a valid JSON Schema: {exc.message}") from None
    if not isinstance(name, str) or not isinstance(strict, bool | None):
        raise _error("name must be a string and strict a boolean")
    return OutputSpec(schema, name, strict)
