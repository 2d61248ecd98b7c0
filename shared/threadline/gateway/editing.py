"""The gateway's editor endpoints (docs/gateway.md, "Editor overrides"; decisions 62, 68): read an agent's editable
fields and save its overrides, stripped of what the agent's ``editor`` option locks.

``GET /v1/agents/{agent_id}/editor`` → :func:`view`; ``PUT`` → :func:`save`. Only a caller with
the ``editor`` scope reaches them (checked by :mod:`threadline.gateway.app`). The answers carry
the overrides' ``version`` (and :func:`etag` of it); a save names the version it was built on
(:func:`precondition`) and is refused when another save came first (decision 200).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from threadline.flows.agents import read_editable
from threadline.runtime.editor import editor_policy, strip
from threadline.store.agents import overrides_version, write_overrides
from threadline.store.db import Database


class EditorLocked(PermissionError):  # noqa: N818 - what it is: the agent is locked
    """The agent's ``editor`` is ``False``: nothing may be overridden."""


class PreconditionRequired(Exception):  # noqa: N818 - what it is: HTTP's 428, a missing precondition
    """A save names no version (neither ``If-Match`` nor a ``version`` field): it could erase a
    change it never saw."""


class VersionConflict(Exception):  # noqa: N818 - what it is: another save came first (HTTP 412)
    """The stored overrides are at ``current``, not the version the save was built on."""

    def __init__(self, current: int) -> None:
        super().__init__(f"the overrides were saved since (now version {current}): reload them, then save")
        self.current = current


ANY = -1
"""The precondition ``If-Match: *``: save over whatever version is stored."""


def etag(version: int) -> str:
    """The strong entity tag of an overrides ``version``: ``"v3"``."""
    return f'"v{version}"'


def precondition(if_match: str | None, version: object) -> int | None:
    """The version a save was built on, from its ``If-Match`` header (``"v3"``, ``W/"v3"``, ``*``
    → :data:`ANY`) or its body's ``version`` (an int ≥ 0; 0: no overrides stored yet); when both
    are given they must agree; ``None`` when neither is given (:func:`save` refuses it).

    Raises:
        ValueError: an ``If-Match`` that is not one of our tags, a ``version`` that is not an int ≥ 0,
            or the two disagree.
    """
    from_header: int | None = None
    if if_match is not None and if_match.strip():
        tag = if_match.strip().removeprefix("W/")
        if tag == "*":
            from_header = ANY
        elif len(tag) > 3 and tag[:2] == '"v' and tag[-1] == '"' and tag[2:-1].isdigit():
            from_header = int(tag[2:-1])
        else:
            raise ValueError(f"If-Match {if_match!r} is not an editor version tag (\"v<n>\" or *)")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 0):
        raise ValueError(f"version must be an integer >= 0, not {version!r}")
    if from_header is not None and version is not None and from_header not in (ANY, version):
        raise ValueError(f"If-Match {if_match!r} and version {version!r} disagree")
    return from_header if from_header is not None else version


async def view(db: Database, agent_id: str) -> dict[str, Any] | None:
    """``{id, name, editor, code: {instructions, tools}, overrides, updated_at, version}``, or ``None``
    for an agent the cluster does not serve (:func:`threadline.flows.agents.read_editable`)."""
    async with db.connection() as conn:
        return await read_editable(conn, agent_id)


async def save(db: Database, agent_id: str, body: Mapping[str, object], *, by: str,
               expected: int | None) -> dict[str, Any] | None:
    """Replace the agent's overrides with ``body`` (``{instructions?, tools?: {id: {description}}}``)
    less what its policy locks, tools its code does not define and unknown keys (``id``,
    ``name``, ``model``…), if they are still at version ``expected`` (:func:`precondition`;
    :data:`ANY`: whatever is stored; ``None``: none named, refused); returns the new :func:`view`
    (its ``version`` one more) with ``stripped`` (the fields left out), or ``None`` for an unknown
    agent. The next run of the agent uses them.

    Raises:
        EditorLocked: the agent is locked (``editor=False``) and ``body`` overrides something.
        PreconditionRequired: ``expected`` is ``None`` (checked after the lock).
        VersionConflict: the overrides are at another version (nothing saved).
        ValueError: a value over the length limits.
    """
    current = await view(db, agent_id)
    if current is None:
        return None
    policy = editor_policy(current["editor"], agent_id=agent_id)
    wanted = {k: v for k, v in body.items() if v is not None and k != "version"}
    if policy.locked and wanted:
        raise EditorLocked(f"agent {agent_id} is locked: its editor option is False")
    if expected is None:
        raise PreconditionRequired("a save names the version it was built on: If-Match: \"v<n>\" "
                                   "(GET's ETag), a version field, or If-Match: * to save over any")
    tools = current["code"]["tools"]
    kept, stripped = strip(policy, wanted, None if tools is None else list(tools))
    async with db.connection() as conn, conn.transaction():  # the answer shows what this save wrote
        written = await write_overrides(conn, agent_id, kept, by=by, expected=None if expected == ANY else expected)
        if written is None:
            raise VersionConflict(await overrides_version(conn, agent_id))
        saved = await read_editable(conn, agent_id)
    assert saved is not None  # the agent row was read above; agents are never deleted
    return {**saved, "stripped": stripped}
