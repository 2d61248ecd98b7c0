"""Topic names, the thread key, and the safe per-thread chunk-topic name rule.

A thread is identified by ``(resource_id, thread_id)`` (docs/decisions.md#thread-key). Its Kafka key is the
*thread key*: both ids percent-encoded and joined by ``:`` (``res-1:th-1``), so no pair of ids
can produce the key of another pair. Every event about a thread is keyed by it (invariant 1).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal
from urllib.parse import quote, unquote

if TYPE_CHECKING:
    from threadline.config import Settings

_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]+")
MAX_TOPIC_LEN = 249


def thread_key(resource_id: str, thread_id: str) -> str:
    """Return the thread key of ``(resource_id, thread_id)``, e.g. ``res-1:th-1``."""
    return f"{quote(resource_id, safe='')}:{quote(thread_id, safe='')}"


def split_thread_key(key: str) -> tuple[str, str]:
    """Inverse of :func:`thread_key`. Raises ``ValueError`` on a malformed key."""
    resource, sep, thread = key.partition(":")
    if not sep:
        raise ValueError(f"not a thread key: {key!r}")
    return unquote(resource), unquote(thread)


ChunkLayout = Literal["per-thread", "shared"]
"""Where a thread's chunks go (``Settings.chunk_layout``; docs/decisions.md#shared-chunk-layout)."""


@dataclass(frozen=True, slots=True)
class Topics:
    """The topic names of one Threadline cluster (all share ``prefix``); ``chunk_layout`` says
    which topic holds a thread's chunks (:meth:`chunks`)."""

    prefix: str
    chunk_layout: ChunkLayout = "per-thread"

    @classmethod
    def of(cls, settings: Settings) -> Topics:
        """The topics ``settings`` name (``topic_prefix``, ``chunk_layout``)."""
        return cls(settings.topic_prefix, settings.chunk_layout)

    @property
    def shared_layout(self) -> bool:
        """Whether threads' chunks share :attr:`shared_chunks` (no per-thread topic is made)."""
        return self.chunk_layout == "shared"

    @property
    def shared_chunks(self) -> str:
        """Public, shared layout: every thread's chunks, keyed by thread, one partition per thread
        key (Kafka's default partitioner); ``<prefix>.chunks-shared``, never a per-thread name."""
        return f"{self.prefix}.chunks-shared"

    @property
    def ingress(self) -> str:
        """Public: requests from users (send_message, stream, generate, …), keyed by thread."""
        return f"{self.prefix}.ingress"

    @property
    def replies(self) -> str:
        """Public: replies to requests, keyed by request id (``reply_to`` may name another)."""
        return f"{self.prefix}.replies"

    @property
    def run_commands(self) -> str:
        """Internal: commands to the run-orchestrator, keyed by thread."""
        return f"{self.prefix}.run-commands"

    @property
    def step_tasks(self) -> str:
        """Internal: steps for processor-workers, keyed by thread."""
        return f"{self.prefix}.step-tasks"

    @property
    def step_results(self) -> str:
        """Internal: finished steps back to the orchestrator, keyed by thread."""
        return f"{self.prefix}.step-results"

    @property
    def lifecycle(self) -> str:
        """Public: run and thread lifecycle events, keyed by thread."""
        return f"{self.prefix}.lifecycle"

    @property
    def dead_letters(self) -> str:
        """Public: events that could not be handled, with the reason."""
        return f"{self.prefix}.dead-letters"

    def chunks(self, resource_id: str, thread_id: str) -> str:
        """The topic that holds the thread's chunks: :attr:`shared_chunks` in the shared layout,
        else :meth:`thread_chunks`."""
        return self.shared_chunks if self.chunk_layout == "shared" else self.thread_chunks(resource_id, thread_id)

    def thread_chunks(self, resource_id: str, thread_id: str) -> str:
        """Public per-thread chunk topic: ``<prefix>.chunks.<readable>.<hash>``.

        The readable part keeps ``[a-zA-Z0-9_-]`` of both ids; the 12-hex hash of the exact thread
        key keeps distinct threads on distinct topics. The name never exceeds 249 characters.
        """
        digest = hashlib.sha256(thread_key(resource_id, thread_id).encode()).hexdigest()[:12]
        readable = f"{_UNSAFE.sub('_', resource_id)}.{_UNSAFE.sub('_', thread_id)}"
        head = f"{self.prefix}.chunks."
        room = MAX_TOPIC_LEN - len(head) - len(digest) - 1
        return f"{head}{readable[:room]}.{digest}"

    def group(self, service: str) -> str:
        """Consumer group of a service, e.g. ``threadline.processor-worker``."""
        return f"{self.prefix}.{service}"

    def internal(self) -> list[str]:
        """Every fixed topic, created at service start."""
        return [self.ingress, self.replies, self.run_commands, self.step_tasks,
                self.step_results, self.lifecycle, self.dead_letters]
