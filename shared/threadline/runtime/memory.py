"""An agent's memory options (Mastra's ``Memory`` options): how much of the thread a run reads,
and whether it writes its messages back. Pure decisions; the worker applies them.

    Agent(id="a", memory=Memory(last_messages=10))        # the last 10 messages
    Agent(id="b", memory={"lastMessages": False})         # no history, messages still stored
    Agent(id="c", memory=Memory(read_only=True))          # history read, nothing stored
    Agent(id="d", memory=False)                           # memory off: neither
    agent.generate(msg, {"memory": {"resource": r, "thread": t, "options": {"readOnly": True}}})
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from threadline.errors import ConfigurationError
from threadline.events.json_types import JSONObject

DEFAULT_LAST_MESSAGES = 200
"""Messages a run reads when the agent sets no ``last_messages`` (the worker's history limit)."""

_ALIASES = {"lastMessages": "last_messages", "readOnly": "read_only"}


@dataclass(frozen=True, slots=True)
class Memory:
    """Memory options.

    Attributes:
        last_messages: how many of the thread's latest stored messages a run reads (``False``
            or ``0``: none).
        read_only: the run reads the thread but stores none of its messages (its input and
            response are in its stream and its result only).
        enabled: ``False`` is memory off (``Agent(memory=False)``): no history, nothing stored.
    """

    last_messages: int | bool = DEFAULT_LAST_MESSAGES
    read_only: bool = False
    enabled: bool = True

    @property
    def reads(self) -> int:
        """Messages read at step 0 (0: none)."""
        if not self.enabled or self.last_messages is False:
            return 0
        return int(self.last_messages)

    @property
    def stores(self) -> bool:
        """Whether the run's messages are written to the thread."""
        return self.enabled and not self.read_only

    def to_json(self) -> JSONObject:
        """``{lastMessages, readOnly, enabled}`` (as clients read it)."""
        return {"lastMessages": self.last_messages, "readOnly": self.read_only, "enabled": self.enabled}


def _options(value: Mapping[str, object], where: str) -> dict[str, Any]:
    out = {_ALIASES.get(k, k): v for k, v in value.items()}
    unknown = set(out) - {"last_messages", "read_only"}
    if unknown:
        raise ConfigurationError(f"{where}: unknown memory option(s) {sorted(unknown)} "
                                 "(known: last_messages / lastMessages, read_only / readOnly)")
    last = out.get("last_messages", DEFAULT_LAST_MESSAGES)
    if last is not False and (not isinstance(last, int) or isinstance(last, bool) or last < 0):
        raise ConfigurationError(f"{where}: last_messages must be a non-negative integer or False, got {last!r}")
    if not isinstance(out.get("read_only", False), bool):
        raise ConfigurationError(f"{where}: read_only must be a boolean")
    return out


def memory_config(value: object, *, where: str = "memory") -> Memory:
    """An agent's ``memory`` option as :class:`Memory`: ``None`` (the default: the last
    :data:`DEFAULT_LAST_MESSAGES`), ``False`` (off), a :class:`Memory`, or a dict of options
    (``{"last_messages": 10, "read_only": True}``; Mastra's camelCase accepted, also nested
    under ``options`` as in Mastra's ``new Memory({options: {...}})``).

    Raises:
        ConfigurationError: another type, an unknown option or a bad value.
    """
    if value is None or value is True:
        return Memory()
    if value is False:
        return Memory(last_messages=False, enabled=False)
    if isinstance(value, Memory):
        return value
    if isinstance(value, Mapping):
        inner = value.get("options", value) if set(value) <= {"options"} else value
        return Memory(**_options(inner, where))
    raise ConfigurationError(f"{where} must be None, False, a Memory or a dict of options, got {type(value).__name__}")


def for_run(agent_memory: Memory, call: Mapping[str, object] | None) -> Memory:
    """The memory of one run: the agent's, with a call's ``memory_options`` over it (Mastra's
    ``memory.options`` of ``generate`` / ``stream``). A call cannot turn an agent's memory on.

    Raises:
        ConfigurationError: an unknown option or a bad value in ``call``.
    """
    if not call:
        return agent_memory
    return replace(agent_memory, **_options(call, "memory options"))


def recent(history: Sequence[object], memory: Memory) -> list[object]:
    """The last ``memory.reads`` messages of ``history`` (oldest first)."""
    n = memory.reads
    return list(history[-n:]) if n > 0 else []
