"""The inbox's shorthand marks, shared by the Kafka client and the client over HTTP: each is
``mark_notification`` with its status (Mastra's ``markSeen`` / ``dismiss`` / ``archive``)."""

from __future__ import annotations

from typing import Any


class InboxMarks:
    """``mark_seen``, ``dismiss`` and ``archive`` over the class's own ``mark_notification``."""

    async def mark_notification(self, record_id: str, status: str, *, resource_id: str,
                                thread_id: str) -> dict[str, Any] | None:
        """Mark a record ``seen``, ``dismissed`` or ``archived`` (each client implements it)."""
        raise NotImplementedError

    async def mark_seen(self, record_id: str, *, resource_id: str, thread_id: str) -> dict[str, Any] | None:
        """The record marked ``seen``; ``None`` if the thread has no such record."""
        return await self.mark_notification(record_id, "seen", resource_id=resource_id, thread_id=thread_id)

    async def dismiss(self, record_id: str, *, resource_id: str, thread_id: str) -> dict[str, Any] | None:
        """The record marked ``dismissed``; ``None`` if the thread has no such record."""
        return await self.mark_notification(record_id, "dismissed", resource_id=resource_id, thread_id=thread_id)

    async def archive(self, record_id: str, *, resource_id: str, thread_id: str) -> dict[str, Any] | None:
        """The record marked ``archived``; ``None`` if the thread has no such record."""
        return await self.mark_notification(record_id, "archived", resource_id=resource_id, thread_id=thread_id)
