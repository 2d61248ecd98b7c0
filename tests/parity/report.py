"""``docs/parity.md``: the verdict of every parity scenario and the differences behind it."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.parity.compare import Diff, Rule

_EXCERPTS = 3


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(results: list[tuple[dict[str, Any], str, dict[str, list[Diff]]]], rules: list[Rule]) -> str:
    """The report: a summary, one table row per scenario, then each difference with excerpts
    of both sides (at most three per scenario it appears in)."""
    by_id = {r.id: r for r in rules}
    counts = Counter(v for _, v, _ in results)
    own_only = sum(1 for _, _, groups in results
                   if any(not (g in by_id and by_id[g].common) for g in groups))
    lines = ["# Parity with @mastra/core 1.71.0", "",
             "Written by `make parity` ([tests/parity/README.md](../tests/parity/README.md) says how it works). Each scenario of",
             "`tests/parity/scenarios.json` runs on @mastra/core in-process and on Threadline's services,",
             "against the same fake model server and scripts; ids and times are normalised, nothing else.",
             "", f"{len(results)} scenarios: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
             + f"; {own_only} show differences of their own beyond the common ones.", "",
             "The differences of each scenario are its own ones first, then the common ones (marked",
             "`common` in `tests/parity/known.json`: the chunk payloads, stored shapes and request shapes",
             "nearly every scenario shows).", "",
             "| scenario | covers | verdict | its own differences | common differences |", "|---|---|---|---|---|"]
    for s, verdict, groups in results:
        def link(g: str) -> str:
            return f"[{g}](#{g.lower()})" if g in by_id else "[unexplained](#unexplained)"
        own = ", ".join(link(g) for g in sorted(groups) if not (g in by_id and by_id[g].common)) or "—"
        shared = ", ".join(link(g) for g in sorted(groups) if g in by_id and by_id[g].common) or "—"
        lines.append(f"| `{s['id']}` | {_cell(s.get('covers', ''))} | {verdict} | {own} | {shared} |")
    seen: dict[str, list[tuple[str, Diff]]] = {}
    where: Counter[str] = Counter()
    for s, _, groups in results:
        for g, diffs in groups.items():
            where[g] += 1
            seen.setdefault(g, []).extend((s["id"], d) for d in diffs[:_EXCERPTS])
    lines += ["", "## Differences", ""]
    for g in sorted(seen, key=lambda x: (x == "?", x)):
        rule = by_id.get(g)
        if rule:
            kind = f"by design ([decision]({rule.decision}))" if rule.kind == "design" else "a bug, to fix"
            lines += [f"### {g}", "", f"{rule.title} — {kind}; in {where[g]} scenarios.", ""]
        else:
            lines += ["### Unexplained", "", "Differences no rule of `tests/parity/known.json` names yet "
                      f"(so bugs until one does); in {where[g]} scenarios.", ""]
        lines += ["| scenario | path | Mastra | Threadline |", "|---|---|---|---|"]
        for sid, d in seen[g][:12]:
            m, t = d.excerpt()
            lines.append(f"| `{sid}` | `{_cell(d.path)}` | `{_cell(m)}` | `{_cell(t)}` |")
        lines.append("")
    return "\n".join(lines) + "\n"
