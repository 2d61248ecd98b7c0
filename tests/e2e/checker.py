"""The exactly-once checker: replays what subscribers observed and what Postgres recorded, and
asserts the stream and run guarantees of docs/reliability.md.

Stream rules (docs/decisions.md#chunk-envelope), per run, after dropping duplicates by ``(run_id, seq)`` and every
chunk of an attempt declared dead by an ``attempt-discarded`` chunk — that attempt and every
earlier attempt of the step (also chunks seen *before* the marker: a client drops them when the
marker arrives):

* ``seq`` strictly increases in topic order; two records with one ``(run_id, seq)`` are the same
  chunk (a conflicting duplicate is an error, not a duplicate);
* no gap: inside one ``(step, attempt)`` the seqs are consecutive; the next kept group starts at
  the previous one's last seq + 1, or (after a dead attempt) with its ``attempt-discarded`` marker;
  the run's first kept chunk is seq 0 or such a marker;
* exactly one ``finish``, the last kept chunk; every kept ``tool-call`` has its ``tool-result``.

Run rules (Postgres): every accepted run is terminal, its user input stored and answered by an
assistant message; exactly one terminal lifecycle event per run (by distinct event id); each
tool call id of the kept stream was executed exactly once (the test tool's side-effect rows) and
no tool call outside the kept stream was executed at all.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

TERMINAL_LIFECYCLE = ("run_finished", "run_failed", "run_aborted", "run_tripwire")


@dataclass
class Figures:
    runs: int = 0
    chunks_observed: int = 0
    chunks_checked: int = 0
    duplicates_dropped: int = 0
    discarded_attempts: int = 0
    discarded_chunks: int = 0
    duplicates: int = 0
    gaps: int = 0
    order_errors: int = 0
    terminal_errors: int = 0
    lost: int = 0
    tool_calls: int = 0
    tool_executions: int = 0
    tool_reexecutions: int = 0
    tool_reruns_after_kill: int = 0
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["problems"] = d["problems"][:20]
        return d

    @property
    def ok(self) -> bool:
        return not self.problems


def nested(chunk: dict[str, Any]) -> dict[str, Any]:
    """A sub-agent's chunk delivered to its parent's thread (a ``tool-output`` carrying the child's
    stamped chunk, decision 78) is checked as that chunk: the child's stream rules hold on every
    copy, and a copy that differs from the child's own is a conflicting duplicate."""
    inner = chunk.get("payload", {}).get("output") if chunk.get("type") == "tool-output" else None
    if isinstance(inner, dict) and inner.get("runId") == chunk.get("runId") and "seq" in inner:
        return inner
    return chunk


def clean(chunks: list[dict[str, Any]], fig: Figures) -> dict[str, list[dict[str, Any]]]:
    """Drop duplicates by (run_id, seq) and dead attempts; return the kept chunks per run (topic order)."""
    seen: dict[tuple[str, int], dict[str, Any]] = {}
    unique = []
    for c in chunks:
        fig.chunks_observed += 1
        c = nested(c)
        key = (c.get("runId"), c.get("seq"))
        if key in seen:
            fig.duplicates_dropped += 1
            if seen[key] != c:
                fig.duplicates += 1
                fig.problems.append(f"two different chunks share {key}: {seen[key]['type']} / {c['type']}")
            continue
        seen[key] = c
        unique.append(c)
    dead: dict[tuple[str, int], int] = {}  # (run, step) → highest dead attempt: it and every earlier one
    for c in unique:
        if c["type"] == "attempt-discarded":
            fig.discarded_attempts += 1
            key = (c["runId"], c["payload"]["step"])
            dead[key] = max(dead.get(key, -1), c["payload"]["attempt"])
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in unique:
        if c["type"] != "attempt-discarded" and c["attempt"] <= dead.get((c["runId"], c["step"]), -1):
            fig.discarded_chunks += 1
            continue
        out[c["runId"]].append(c)
    return out


def check_stream(run_id: str, kept: list[dict[str, Any]], fig: Figures, *, expect_finish: bool = True) -> None:
    """The stream rules of the module docstring for one run's kept chunks."""
    p = fig.problems
    fig.chunks_checked += len(kept)
    seqs = [c["seq"] for c in kept]
    if any(b <= a for a, b in itertools.pairwise(seqs)):
        fig.order_errors += 1
        p.append(f"{run_id}: seq not strictly increasing: {seqs[:50]}")
    prev = None
    for c in kept:
        if prev is None:
            ok = c["seq"] == 0 or c["type"] == "attempt-discarded"
        elif (c["step"], c["attempt"]) == (prev["step"], prev["attempt"]):
            ok = c["seq"] == prev["seq"] + 1
        else:
            ok = c["seq"] == prev["seq"] + 1 or (c["type"] == "attempt-discarded" and c["seq"] > prev["seq"])
        if not ok:
            fig.gaps += 1
            p.append(f"{run_id}: gap before seq {c['seq']} ({c['type']} step {c['step']} attempt {c['attempt']}),"
                     f" previous {prev and prev['seq']}")
        prev = c
    finishes = [c for c in kept if c["type"] == "finish"]
    if expect_finish and (len(finishes) != 1 or kept[-1]["type"] != "finish"):
        fig.terminal_errors += 1
        p.append(f"{run_id}: {len(finishes)} finish chunks; last kept chunk {kept[-1]['type'] if kept else None}")
    calls = [c["payload"]["toolCallId"] for c in kept if c["type"] == "tool-call"]
    results = [c["payload"]["toolCallId"] for c in kept if c["type"] in ("tool-result", "tool-error")]
    if Counter(calls) != Counter(results) or len(set(calls)) != len(calls):
        p.append(f"{run_id}: tool calls {calls} vs results {results}")


def check_runs(*, observed: list[list[dict[str, Any]]], run_ids: list[str], runs: dict[str, Any],
               messages: dict[str, list[Any]], lifecycle: list[dict[str, Any]],
               effects: list[Any] | None = None, killed_pids: set[int] | None = None,
               statuses: tuple[str, ...] = ("finished",)) -> Figures:
    """Check every observer's chunk history (each a list of chunks in topic order, e.g. a live
    subscriber and a replay from offset 0) against the runs' records.

    Args:
        observed: chunk histories, one per subscriber (all threads mixed is fine).
        run_ids: the run ids ingress accepted.
        runs: ``runs`` rows by run id.
        messages: stored ``messages`` rows by run id.
        lifecycle: lifecycle events (dicts with ``event_id``, ``type``, ``run_id``).
        effects: rows ``(run_id, tool_call_id, pid)`` the test tool wrote, one per real execution.
        killed_pids: processes killed with ``kill -9``. A tool call runs once; it may run again
            only if every earlier execution was in a killed process (killed after the side
            effect and before its result was stored: the at-least-once window the idempotency
            key is for). Such re-runs are counted in ``tool_reruns_after_kill``.
        statuses: the acceptable terminal statuses.
    """
    fig = Figures(runs=len(run_ids))
    views = []
    for history in observed:
        kept = clean(history, fig)
        views.append(kept)
        for run_id in run_ids:
            check_stream(run_id, kept.get(run_id, []), fig)
    for a, b in itertools.pairwise(views):  # every subscriber ends with the same view
        for run_id in run_ids:
            if [c["seq"] for c in a.get(run_id, [])] != [c["seq"] for c in b.get(run_id, [])]:
                fig.problems.append(f"{run_id}: subscribers disagree")
    terminal = defaultdict(set)
    for ev in lifecycle:
        if ev.get("type") in TERMINAL_LIFECYCLE and ev.get("run_id"):
            terminal[ev["run_id"]].add(ev["event_id"])
    for run_id in run_ids:
        row = runs.get(run_id)
        stored = messages.get(run_id, [])
        if row is None or row["status"] not in statuses:
            fig.lost += 1
            fig.problems.append(f"{run_id}: status {row and row['status']} {row and row['error']}")
            continue
        if len(terminal[run_id]) != 1:
            fig.terminal_errors += 1
            fig.problems.append(f"{run_id}: {len(terminal[run_id])} terminal lifecycle events")
        roles = [m["role"] for m in stored]
        if roles.count("user") != 1 or "assistant" not in roles:
            fig.lost += 1
            fig.problems.append(f"{run_id}: stored roles {roles}")
    if effects is not None:
        executions = Counter((r["run_id"], r["tool_call_id"]) for r in effects)
        by_pid: dict[tuple[str, str], list[int]] = defaultdict(list)
        for r in effects:
            by_pid[(r["run_id"], r["tool_call_id"])].append(r.get("pid") if hasattr(r, "get") else r["pid"])
        fig.tool_executions = sum(executions.values())
        kept_calls = {(run_id, c["payload"]["toolCallId"]) for run_id, chunks in views[0].items()
                      for c in chunks if c["type"] == "tool-call"}
        fig.tool_calls = len(kept_calls)
        for call in kept_calls:
            n = executions.get(call, 0)
            in_killed = sum(1 for pid in by_pid[call] if pid in (killed_pids or ()))
            if n == 0 or n - 1 > in_killed:
                fig.tool_reexecutions += abs(n - 1)
                fig.problems.append(f"tool call {call} executed {n} times ({in_killed} in killed processes)")
            elif n > 1:
                fig.tool_reruns_after_kill += n - 1
        for call in set(executions) - kept_calls:
            if call[0] in run_ids:
                fig.tool_reexecutions += executions[call]
                fig.problems.append(f"tool call {call} executed but not in the stream")
    return fig
