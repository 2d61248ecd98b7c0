"""What a subscription tracks of the runs it delivered: the highest ``seq`` per run (duplicates
are dropped by ``(runId, seq)``), the run seen streaming, and what it reports as the thread's
active run (Mastra's ``activeRunId()``). Shared by the Kafka and the HTTP subscription."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from threadline.events.chunk_types import ChunkBody, ChunkKind, known
from threadline.events.signals import LEGACY_TYPES


class Delivered:
    """The runs a subscription delivered chunks of.

    Attributes:
        seen: run id -> the highest ``seq`` delivered (starts from the subscriber's ``after``).
        streaming: the run whose last delivered chunk was not its ``finish`` (``None``: none).
        finished: the run whose ``finish`` was delivered last.
    """

    __slots__ = ("finished", "seen", "streaming")

    def __init__(self, after: dict[str, int] | None = None) -> None:
        self.seen: dict[str, int] = dict(after or {})
        self.streaming: str | None = None
        self.finished: str | None = None

    def take(self, chunk: ChunkBody | Mapping[str, object]) -> bool:
        """Record ``chunk`` as delivered; ``False`` (nothing recorded) when it has no ``runId``
        string or ``seq`` integer, or its ``seq`` was delivered already."""
        run_id, seq = chunk.get("runId"), chunk.get("seq")
        if not isinstance(run_id, str) or not isinstance(seq, int) or seq <= self.seen.get(run_id, -1):
            return False
        self.seen[run_id] = seq
        if chunk.get("type") == ChunkKind.FINISH:  # every run ends with one finish (after abort / error / tripwire)
            self.finished = run_id
            if self.streaming == run_id:
                self.streaming = None
        else:
            self.streaming = run_id
        return True

    def active(self, holder: str | None) -> str | None:
        """The lease holder ``holder`` as the active run, unless it is the run whose ``finish``
        was delivered last: a run never goes on after its finish, and its lease is released just
        after the finish is published (by the orchestrator, once it applied the run's last step)."""
        return None if holder is not None and holder == self.finished else holder


def hidden_echo(chunk: ChunkBody, hide: bool | Collection[str]) -> bool:
    """``hide_signals`` of a subscription or of a call's own stream: ``True`` hides every signal
    echo (``data-user-message``, ``data-signal``), a collection of signal types hides the echoes
    of those types only (Mastra's legacy names too: ``user-message`` is ``user``,
    ``system-reminder`` ``reactive``)."""
    k = known(chunk) if hide else None
    if k is None or (k["type"] != ChunkKind.DATA_USER_MESSAGE and k["type"] != ChunkKind.DATA_SIGNAL):
        return False
    if hide is True:
        return True
    kind = str(k["data"].get("type"))
    return not isinstance(hide, bool) and any(LEGACY_TYPES.get(t, t) == LEGACY_TYPES.get(kind, kind) for t in hide)
