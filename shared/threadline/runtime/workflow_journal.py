"""Where a durable workflow records its steps (decision 81): the :class:`Journal` a workflow
the :class:`Journal` a workflow tool's call writes to, and its records. Apart from
:mod:`threadline.runtime.workflows` so that a tool's context can name the journal's type
without importing the workflows that are tools themselves."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class Entry:
    """A journal record of one step: ``status`` ``running`` / ``success`` / ``failed``."""

    status: str
    output: Any = None
    error: str | None = None


class Journal(Protocol):
    """Where a workflow's steps are recorded (one per tool call of a workflow)."""

    async def load(self) -> dict[str, Entry]:
        """Every recorded step of this tool call, by path."""

    async def start(self, path: str) -> None:
        """Record ``path`` as running (under this attempt). Raises :class:`WorkflowFencedError` when
        this worker no longer owns the step, :class:`JournalUnavailableError` when unreachable."""

    async def end(self, path: str, status: str, output: object, error: str | None) -> None:
        """Record ``path``'s end (``success`` / ``failed``). Raises as :meth:`start`."""


JournalFactory = Callable[[str], Journal]
"""``tool_call_id -> Journal`` for one step attempt (the worker's; ``None``: in memory)."""
