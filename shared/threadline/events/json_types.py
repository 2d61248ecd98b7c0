"""JSON as values: what ``orjson.loads`` answers and what a user passes through untouched
(metadata, tool arguments, a stored message's content, a run's usage).

:data:`JSONValue` is recursive and holds no ``object``: reading it means narrowing it
(``isinstance(v, dict)``) before indexing, as for any decoded JSON.
"""

from __future__ import annotations

from typing import TypeAlias

JSONValue: TypeAlias = str | int | float | bool | list["JSONValue"] | dict[str, "JSONValue"] | None
"""One JSON value: a string, a number, a boolean, ``null``, an array or an object."""

JSONObject: TypeAlias = dict[str, JSONValue]
"""One JSON object (``{"key": value}``)."""

__all__ = ["JSONObject", "JSONValue"]
