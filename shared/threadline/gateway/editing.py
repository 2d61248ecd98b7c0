"""The gateway's editor endpoints (docs/gateway.md, "Editor overrides"; decisions 62, 68): read an agent's editable
fields and save its overrides, stripped of what the agent's ``editor`` option locks.

``GET /v1/agents/{agent_id}/editor`` → :func:`view`; ``PUT`` → :func:`save`. Only a caller with
the ``editor`` scope reaches them (checked by :mod:`threadline.gateway.app`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from threadline.flows.agents import read_editable
from threadline.runtime.editor import editor_policy, strip
from threadline.store.agents import write_overrides
from threadline.store.db import Database


class EditorLocked(PermissionError):  # noqa: N818 - what it is: the agent is locked
    """The agent's ``editor`` is ``False``: nothing may be overridden."""


async def view(db: Database, agent_id: str) -> dict[str, Any] | None:
    """``{id, name, editor, code: {instructions, tools}, overrides, updated_at}``, or ``None``
    for an agent the cluster does not serve (:func:`threadline.flows.agents.read_editable`)."""
    async with db.connection() as conn:
        return await read_editable(conn, agent_id)


async def save(db: Database, agent_id: str, body: Mapping[str, object], *, by: str) -> dict[str, Any] | None:
    """Replace the agent's overrides with ``body`` (``{instructions?, tools?: {id: {description}}}``)
    less what its policy locks, tools its code does not define and unknown keys (``id``,
    ``name``, ``model``…); returns the new :func:`view` with ``stripped`` (the fields left out),
    or ``None`` for an unknown agent. The next run of the agent uses them.

    Raises:
        EditorLocked: the agent is locked (``editor=False``) and ``body`` overrides something.
        ValueError: a value over the length limits.
    """
    current = await view(db, agent_id)
    if current is None:
        return None
    policy = editor_policy(current["editor"], agent_id=agent_id)
    wanted = {k: v for k, v in body.items() if v is not None}
    if policy.locked and wanted:
        raise EditorLocked(f"agent {agent_id} is locked: its editor option is False")
    tools = current["code"]["tools"]
    kept, stripped = strip(policy, wanted, None if tools is None else list(tools))
    async with db.connection() as conn:
        await write_overrides(conn, agent_id, kept, by=by)
        saved = await read_editable(conn, agent_id)
    assert saved is not None  # the agent row was read above; agents are never deleted
    return {**saved, "stripped": stripped}
