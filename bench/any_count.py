"""How much of the code's typing says ``Any``: annotations that mention ``Any`` over all annotations.

An annotation is a parameter's, a return's or an annotated assignment's (``x: T = ...``, class
fields included). It *mentions* ``Any`` when the name ``Any`` (or ``typing.Any``) appears anywhere
in it, string annotations parsed. Prints the ratio for the whole tree and per package (the first
folder under ``shared/threadline/``, or ``<top>`` for loose modules; ``services/<name>``).

Usage: ``python bench/any_count.py [ROOT ...]`` (default: ``shared`` and ``services`` next to this
folder); ``--json`` prints the figures as JSON.
"""

from __future__ import annotations

import ast
import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def annotations(tree: ast.AST) -> Iterator[ast.expr]:
    """Every annotation expression in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) or (isinstance(node, ast.arg) and node.annotation is not None):
            yield node.annotation
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            yield node.returns


def mentions_any(annotation: ast.expr) -> bool:
    """True when ``Any`` appears in ``annotation`` (a string annotation is parsed first)."""
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name) and node.id == "Any":
            return True
        if isinstance(node, ast.Attribute) and node.attr == "Any":
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                inner = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                continue
            if mentions_any(inner):
                return True
    return False


def package_of(path: Path) -> str:
    """``events``, ``client``, ``<top>`` (loose modules of ``threadline``), ``services/ingress`` …"""
    parts = path.relative_to(REPO).parts
    if parts[0] == "shared" and len(parts) > 2:
        rest = parts[2:]
        return rest[0] if len(rest) > 1 else "<top>"
    if parts[0] == "services" and len(parts) > 2:
        return f"services/{parts[1]}"
    return parts[0]


def count(roots: list[Path]) -> tuple[Counter[str], Counter[str]]:
    """``(all annotations, those mentioning Any)`` per package."""
    total: Counter[str] = Counter()
    with_any: Counter[str] = Counter()
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            pkg = package_of(path)
            for ann in annotations(ast.parse(path.read_text(), str(path))):
                total[pkg] += 1
                with_any[pkg] += mentions_any(ann)
    return total, with_any


def main(argv: list[str]) -> None:
    as_json = "--json" in argv
    roots = [Path(a) for a in argv if a != "--json"] or [REPO / "shared", REPO / "services"]
    total, with_any = count(roots)
    rows = {pkg: {"annotations": total[pkg], "any": with_any[pkg],
                  "ratio": round(with_any[pkg] / total[pkg], 3) if total[pkg] else 0.0} for pkg in sorted(total)}
    all_total, all_any = sum(total.values()), sum(with_any.values())
    summary = {"annotations": all_total, "any": all_any, "ratio": round(all_any / all_total, 3) if all_total else 0.0}
    if as_json:
        print(json.dumps({"total": summary, "packages": rows}, indent=2))
        return
    print(f"{'package':<28}{'annotations':>12}{'Any':>6}{'ratio':>8}")
    for pkg, row in rows.items():
        print(f"{pkg:<28}{row['annotations']:>12}{row['any']:>6}{row['ratio']:>8.1%}")
    print(f"{'TOTAL':<28}{all_total:>12}{all_any:>6}{summary['ratio']:>8.1%}")


if __name__ == "__main__":
    main(sys.argv[1:])
