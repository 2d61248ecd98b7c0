"""The chunk envelope of the per-thread chunk topics (invariant 5, DECISIONS 15).

Hot path note: workers build chunk dicts directly and encode them with orjson; this model is the
published schema and what subscribers may validate against.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Chunk(BaseModel):
    """One chunk: Mastra's ``type``/``payload`` plus the addressing fields.

    ``seq`` increases strictly within a run and is never reused. ``attempt`` numbers executions
    of a step; ``attempt-discarded`` tells subscribers to drop a dead attempt's chunks.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    type: str
    """Mastra chunk type: ``start``, ``step-start``, ``text-delta``, ``tool-call``, ``tool-result``,
    ``step-finish``, ``finish``, ``tripwire``, ``error``, ``abort``, ``data-*``, …"""
    run_id: str = Field(alias="runId")
    """Mastra's ``runId``."""
    step: int
    attempt: int
    seq: int
    payload: dict[str, Any] | None = None
    from_: str | None = Field(default=None, alias="from")
    data: Any = None
    """Body of ``data-*`` chunks."""
    transient: bool | None = None
