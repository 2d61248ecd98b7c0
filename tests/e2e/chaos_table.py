"""Print the per-seed table of a chaos sweep (``make chaos-sweep``) from its reports.

    python -m tests.e2e.chaos_table DIR [--markdown]

Reads ``DIR/seed-*.json`` (written by ``tests/e2e/test_chaos.py`` with
``THREADLINE_CHAOS_REPORT_DIR``); prints one row per seed: runs terminal / stuck / duplicates /
gaps / lost, and the sweeper's recoveries. Exits 1 when a seed failed or a report is missing
for a seed named in ``--seeds``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

COLUMNS = ("seed", "runs", "terminal", "stuck", "duplicates", "gaps", "order_errors", "terminal_errors", "lost",
           "recoveries", "seconds", "result")


def rows(directory: Path) -> list[dict]:
    out = []
    for path in sorted(directory.glob("seed-*.json"), key=lambda p: int(p.stem.split("-", 1)[1])):
        r = json.loads(path.read_text())
        out.append({"seed": r["seed"], "runs": r.get("runs", 0), "terminal": r.get("terminal", 0),
                    "stuck": r.get("stuck", 0), "duplicates": r.get("duplicates", 0), "gaps": r.get("gaps", 0),
                    "order_errors": r.get("order_errors", 0), "terminal_errors": r.get("terminal_errors", 0),
                    "lost": r.get("lost", 0), "recoveries": len(r.get("recoveries") or []),
                    "seconds": r.get("seconds_to_all_terminal", "-"), "result": "ok" if r.get("ok") else "FAIL"})
    return out


def render(table: list[dict], *, markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(str(r[c]) for c in COLUMNS) + " |" for r in table]
    else:
        width = {c: max(len(c), *(len(str(r[c])) for r in table)) if table else len(c) for c in COLUMNS}
        lines = ["  ".join(c.rjust(width[c]) for c in COLUMNS)]
        lines += ["  ".join(str(r[c]).rjust(width[c]) for c in COLUMNS) for r in table]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory", type=Path)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--seeds", default="", help="the seeds that must have a report, e.g. 1-20")
    args = ap.parse_args(argv)
    table = rows(args.directory)
    print(render(table, markdown=args.markdown))
    have = {r["seed"] for r in table}
    want: set[int] = set()
    if "-" in args.seeds:
        lo, hi = (int(x) for x in args.seeds.split("-", 1))
        want = set(range(lo, hi + 1))
    elif args.seeds:
        want = {int(x) for x in args.seeds.split(",")}
    missing = sorted(want - have)
    if missing:
        print(f"no report for seeds {missing} (the test did not get that far)")
    failed = [r["seed"] for r in table if r["result"] != "ok"]
    print(f"{len(table)} seeds: {len(table) - len(failed)} ok, {len(failed)} failed {failed or ''}".rstrip())
    return 1 if failed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
