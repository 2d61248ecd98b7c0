"""Compare what the two sides recorded for each scenario: normalise ids and times only, then
diff four aspects (the chunk stream, the model requests, the stored thread, the calls' returns)
and classify each difference by the rules of ``tests/parity/known.json``.

A difference is a :class:`Diff` ``(path, mastra, threadline)``; its ``path`` names the aspect
and, for chunks, the chunk's type and its rank among chunks of that type
(``chunks/step-start#0/payload/request``), or for the sequence of types where it differs and
how (``chunks/sequence/after-start/-/to/data-user-message``: Threadline has one more chunk
after ``start``), so a rule's pattern can name it.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from typing import Any

_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"  # Mastra's uuids
                 r"|\b(?:[a-z]+_)?[0-9a-f]{26}\b"  # threadline.ids.new_id
                 r"|chatcmpl-[0-9a-f]+")  # the fake server's completion ids
_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?"
                  r"|[A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT")  # ISO 8601, HTTP dates
_TIME_KEY = re.compile(r"(?:At|_at|[tT]ime|[tT]imestamp|^created|^updated)$")
_MAX_PER_ASPECT = 60


def normalise(value: Any, agent_ids: set[str], key: str = "") -> Any:
    """``value`` with ids replaced by ``<id>``, agent ids by ``<agent>``, times by ``<time>``."""
    if isinstance(value, dict):
        return {k: normalise(v, agent_ids, k) for k, v in value.items()}
    if isinstance(value, list):
        return [normalise(v, agent_ids, key) for v in value]
    if isinstance(value, str):
        if value in agent_ids:
            return "<agent>"
        return _ISO.sub("<time>", _ID.sub("<id>", value))
    if isinstance(value, int | float) and not isinstance(value, bool) and _TIME_KEY.search(key):
        return "<time>"
    return value


@dataclass(frozen=True)
class Diff:
    path: str
    mastra: Any
    threadline: Any

    def excerpt(self, width: int = 160) -> tuple[str, str]:
        """Both sides as short JSON (``—`` for absent)."""
        def short(v: Any) -> str:
            text = "—" if v is _ABSENT else json.dumps(v, sort_keys=True, default=str)
            return text if len(text) <= width else text[: width - 1] + "…"
        return short(self.mastra), short(self.threadline)


_ABSENT: Any = type("Absent", (), {"__repr__": lambda self: "<absent>"})()


def diff_values(a: Any, b: Any, path: str, out: list[Diff]) -> None:
    """Append every leaf where ``a`` (Mastra) and ``b`` (Threadline) differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            diff_values(a.get(k, _ABSENT), b.get(k, _ABSENT), f"{path}/{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            diff_values(x, y, f"{path}/{i}", out)
    elif a != b:
        out.append(Diff(path, a, b))


_ENVELOPE_DROP = {"payload", "data", "type"}


def diff_chunks(ms: list[dict[str, Any]], tl: list[dict[str, Any]], out: list[Diff]) -> None:
    """The type sequence (difflib opcodes), then payloads of the chunks both sides have."""
    mt, tt = [c["type"] for c in ms], [c["type"] for c in tl]
    matcher = difflib.SequenceMatcher(a=mt, b=tt, autojunk=False)
    rank: dict[str, int] = {}
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op != "equal":
            where = mt[i1 - 1] if i1 else "^"
            was, now = "+".join(mt[i1:i2]) or "-", "+".join(tt[j1:j2]) or "-"
            out.append(Diff(f"chunks/sequence/after-{where}/{was}/to/{now}", mt[i1:i2] or _ABSENT, tt[j1:j2] or _ABSENT))
            continue
        for a, b in zip(ms[i1:i2], tl[j1:j2], strict=True):
            n = rank[a["type"]] = rank.get(a["type"], -1) + 1
            base = f"chunks/{a['type']}#{n}"
            diff_values(a.get("payload", _ABSENT), b.get("payload", _ABSENT), f"{base}/payload", out)
            if "data" in a or "data" in b:
                diff_values(a.get("data", _ABSENT), b.get("data", _ABSENT), f"{base}/data", out)
    m_keys = sorted({k for c in ms for k in c} - _ENVELOPE_DROP)
    t_keys = sorted({k for c in tl for k in c} - _ENVELOPE_DROP)
    if m_keys != t_keys:
        out.append(Diff("chunks/envelope", m_keys, t_keys))


def diff_scenario(mastra: dict[str, Any], threadline: dict[str, Any], agent_ids: set[str]) -> list[Diff]:
    """Every difference between the two records of one scenario (normalised first)."""
    if "failed" in mastra or "failed" in threadline:
        return [Diff("failed", mastra.get("failed", _ABSENT), threadline.get("failed", _ABSENT))]
    m, t = normalise(mastra, agent_ids), normalise(threadline, agent_ids)
    out: list[Diff] = []
    aspects: list[list[Diff]] = []
    for name in ("chunks", "requests", "thread", "returns"):
        mine: list[Diff] = []
        if name == "chunks":
            diff_chunks(m["chunks"], t["chunks"], mine)
        elif name == "requests":
            if len(m["requests"]) != len(t["requests"]):
                mine.append(Diff("requests/count", len(m["requests"]), len(t["requests"])))
            for i, (a, b) in enumerate(zip(m["requests"], t["requests"], strict=False)):
                diff_values(a["body"], b["body"], f"requests/{i}/body", mine)
        elif name == "thread":
            diff_values(m["thread"], t["thread"], "thread", mine)
        else:
            diff_values(m["returns"], t["returns"], "returns", mine)
        aspects.append(mine[:_MAX_PER_ASPECT])
    for mine in aspects:
        out.extend(mine)
    diff_values(m.get("missed", _ABSENT), t.get("missed", _ABSENT), "missed-waits", out)
    return out


@dataclass(frozen=True)
class Rule:
    """One known difference: ``pattern`` (a regex on :attr:`Diff.path`), optionally ``value``
    (a regex one side's value, as JSON, must match), optionally ``scenarios`` (a regex the
    scenario's id must match: a difference one scenario shows by its nature), ``kind``
    ``design`` (with the ``decision`` that says why) or ``bug``, a short ``title``."""

    id: str
    pattern: re.Pattern[str]
    kind: str
    title: str
    decision: str | None = None
    value: re.Pattern[str] | None = None
    common: bool = False
    """Shown by nearly every scenario of its kind (the report lists these apart)."""
    scenarios: re.Pattern[str] | None = None
    """Only the scenarios whose id matches (``None``: every scenario)."""

    @classmethod
    def of(cls, raw: dict[str, Any]) -> Rule:
        value = re.compile(raw["value"]) if raw.get("value") else None
        scenarios = re.compile(raw["scenarios"]) if raw.get("scenarios") else None
        return cls(raw["id"], re.compile(raw["pattern"]), raw["kind"], raw["title"], raw.get("decision"), value,
                   bool(raw.get("common")), scenarios)

    def names(self, d: Diff, scenario: str | None = None) -> bool:
        """Whether this rule explains difference ``d`` (of the scenario ``scenario``)."""
        if self.scenarios is not None and (scenario is None or not self.scenarios.search(scenario)):
            return False
        if not self.pattern.search(d.path):
            return False
        return self.value is None or any(self.value.search(json.dumps(v, default=str))
                                         for v in (d.mastra, d.threadline) if v is not _ABSENT)


def classify(diffs: list[Diff], rules: list[Rule], scenario: str | None = None) -> tuple[str, dict[str, list[Diff]]]:
    """The verdict of scenario ``scenario`` (``identical``, ``differs by design``, ``differs``) and
    its differences grouped by rule id (``?`` for those no rule names: unexplained, so a bug)."""
    groups: dict[str, list[Diff]] = {}
    for d in diffs:
        rule = next((r for r in rules if r.names(d, scenario)), None)
        groups.setdefault(rule.id if rule else "?", []).append(d)
    if not groups:
        return "identical", groups
    kinds = {r.kind for r in rules if r.id in groups}
    if "?" in groups or "bug" in kinds:
        return "differs", groups
    return "differs by design", groups
