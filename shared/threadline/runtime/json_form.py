"""The one rule that turns a value user code hands back into JSON (decision 217).

A tool's result, a workflow step's output and a ``data-*`` chunk written by a tool are stored
(PostgreSQL ``jsonb``), streamed (Kafka) and sent to the model, each by its own encoder. They are
brought to plain JSON values once, where user code hands them over, so the three always agree,
and a value with no JSON form fails there — before anything is stored, as the call's
``tool-error`` — never later, where it would look like a fault of the store and be retried (with
the tool's side effect run again). Mastra's ``ensureSerializable`` does the same for JavaScript
values (a ``BigInt`` becomes a string, ``NaN`` ``null``).

=====================================  =============================================
value                                  JSON
=====================================  =============================================
``None``, ``bool``, ``str``            as it is
``int`` within 64 bits                 as it is (``-2**63 <= n < 2**64``)
``int`` beyond 64 bits                 its decimal digits, a string (``"1180591620717411303424"``)
``float``                              as it is; NaN and ±infinity become ``null``
``decimal.Decimal``                    ``str(value)``, a string (``"12.50"``)
``bytes``, ``bytearray``, memoryview   ``{"base64": "<standard base64>"}``
``datetime``, ``date``, ``time``       ``value.isoformat()``
``uuid.UUID``                          its canonical string
an ``Enum`` member                     its ``value``, by this rule
a pydantic model                       ``model_dump(mode="json")``, by this rule
a dataclass instance                   an object of its fields, by this rule
a mapping                              an object; keys: ``str`` as they are, ``int`` and
                                       ``float`` as their digits, ``True``/``False``/``None``
                                       as ``"true"``/``"false"``/``"null"``, an ``Enum``'s value
``list``, ``tuple``                    an array
``set``, ``frozenset``                 a sorted array (sorted by value where the items
                                       compare, else by their JSON text)
anything else, a key of another type,  :class:`~threadline.errors.NotSerialisableError`
or a container inside itself           naming the type and the path (``$.a[0]``)
=====================================  =============================================
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import math
import re
import uuid
from collections.abc import Mapping
from decimal import Decimal
from enum import Enum
from typing import Any

import orjson
from pydantic import BaseModel

from threadline.errors import NotSerialisableError
from threadline.events.json_types import JSONValue

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INT_MIN, _INT_END = -(2**63), 2**64


def json_form(value: object, *, what: str = "result") -> JSONValue:
    """``value`` as plain JSON values (dicts with ``str`` keys, lists, strings, numbers, booleans,
    ``None``) by the rule in the module docstring; a value already plain comes back equal.

    Args:
        value: what user code returned.
        what: how an error names the value (``"result"``, ``"data"``).

    Raises:
        NotSerialisableError: a part of ``value`` has no JSON form (its type and path named).
    """
    return _form(value, "$", set(), what)


def _form(value: object, path: str, inside: set[int], what: str) -> Any:
    if value is None or type(value) in (bool, str):
        return value
    if isinstance(value, Enum):
        return _form(value.value, path, inside, what)
    if isinstance(value, str):  # a subclass of str
        return str(value)
    if isinstance(value, int):
        return int(value) if _INT_MIN <= value < _INT_END else str(int(value))
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    simple = _simple(value)
    if simple is not _NONE:
        return simple
    if isinstance(value, BaseModel):
        return _form(value.model_dump(mode="json"), path, inside, what)
    if not isinstance(value, Mapping | list | tuple | set | frozenset) and not _is_dataclass(value):
        raise NotSerialisableError(what=what, type_name=type(value).__name__, path=path)
    if id(value) in inside:
        raise NotSerialisableError(what=what, type_name=f"{type(value).__name__} inside itself", path=path)
    inside.add(id(value))
    try:
        return _container(value, path, inside, what)
    finally:
        inside.discard(id(value))


_NONE = object()


def _simple(value: object) -> Any:
    """The JSON of a leaf type that is not a Python JSON type, or ``_NONE``."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, datetime.date | datetime.time):  # datetime is a date
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return _NONE


def _is_dataclass(value: object) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _container(value: object, path: str, inside: set[int], what: str) -> Any:
    if _is_dataclass(value):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}  # type: ignore[arg-type]  # an instance, checked above
        return {k: _form(v, _child(path, k), inside, what) for k, v in fields.items()}
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = _key(key, path, what)
            out[name] = _form(item, _child(path, name), inside, what)
        return out
    if isinstance(value, set | frozenset):
        return _sorted([_form(item, f"{path}[]", inside, what) for item in value])
    assert isinstance(value, list | tuple)
    return [_form(item, f"{path}[{i}]", inside, what) for i, item in enumerate(value)]


def _key(key: object, path: str, what: str) -> str:
    if isinstance(key, Enum):
        key = key.value
    if isinstance(key, str):
        return str(key)
    if key is None or isinstance(key, bool):
        return {None: "null", True: "true", False: "false"}[key]
    if isinstance(key, int | float):
        return str(key)
    raise NotSerialisableError(what=what, type_name=f"{type(key).__name__} as a dict key", path=path)


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if _PLAIN_KEY.match(key) else f"{path}[{orjson.dumps(key).decode()}]"


def _sorted(items: list[Any]) -> list[Any]:
    """A set's items in a stable order: by value where they compare, else by their JSON text."""
    try:
        return sorted(items)
    except TypeError:
        return sorted(items, key=lambda v: orjson.dumps(v, option=orjson.OPT_SORT_KEYS))
