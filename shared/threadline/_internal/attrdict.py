"""``AttrDict``: a dict whose keys read and write as attributes, so Mastra-shaped data (messages,
chunks) can be used as ``msg.content.parts`` in processors and still be plain JSON."""

from __future__ import annotations

from typing import Any


class AttrDict(dict[str, Any]):
    """A ``dict`` with attribute access; missing attributes read as ``None``."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            if name.startswith("__"):
                raise AttributeError(name) from None
            return None

    def __setattr__(self, name: str, value: object) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        self.pop(name, None)

    def copy(self) -> AttrDict:
        return AttrDict(self)


_CONTAINERS = (dict, list)  # a tuple: isinstance with a union type is slower


def wrap(value: object) -> Any:
    """Recursively turn dicts into :class:`AttrDict` (lists are walked; other values kept).

    Per chunk on the streaming path: a dict is copied once (C level) and only its nested
    containers are replaced, instead of rebuilt key by key."""
    if isinstance(value, AttrDict):
        for k, v in value.items():
            if isinstance(v, _CONTAINERS):
                dict.__setitem__(value, k, wrap(v))
        return value
    if isinstance(value, dict):
        out = AttrDict(value)
        for k, v in value.items():
            if isinstance(v, _CONTAINERS):
                dict.__setitem__(out, k, wrap(v))
        return out
    if isinstance(value, list):
        return [wrap(v) if isinstance(v, _CONTAINERS) else v for v in value]
    return value
