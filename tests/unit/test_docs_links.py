"""Every relative link of the docs resolves: README.md, docs/*.md and bench/results/HISTORY.md link
to files that exist and to anchors those files define (an ``<a id>`` or a heading, as GitHub makes
its anchor), and every ``<page>.md#<anchor>`` the code and the docs name in prose exists too."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "bench" / "results" / "HISTORY.md", *(ROOT / "docs").glob("*.md")])
"""The Markdown pages whose links are checked."""
PROSE = [ROOT / "shared", ROOT / "services", ROOT / "bench", ROOT / "deploy", ROOT / "docs", ROOT / "README.md"]
"""Where a ``docs/<page>.md#<anchor>`` named in prose (docstrings, comments, docs) is checked."""

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_NAMED = re.compile(r"(?<![\w/.-])((?:docs/)?[\w-]+\.md)#([\w-]+)")
_FENCE = re.compile(r"^\s*(```|~~~)")


def slug(title: str) -> str:
    """GitHub's anchor of a heading: lower case; letters, digits, ``_``, ``-`` and spaces kept, spaces
    as hyphens, everything else (markup, punctuation, symbols) dropped."""
    text = re.sub(r"<[^>]+>", "", title).strip().lower()
    return "".join("-" if ch == " " else ch for ch in text
                   if ch in " -_" or unicodedata.category(ch)[0] in "LNM")


def anchors(page: Path) -> set[str]:
    """The anchors ``page`` defines: its ``<a id="…">`` and its headings (a repeated heading gets
    ``-1``, ``-2`` …), headings inside fenced code left out."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        found.update(re.findall(r'<a id="([^"]+)"', line))
        heading = re.match(r"#{1,6} (.+)", line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def _broken_links(page: Path) -> list[str]:
    broken = []
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no such anchor")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_of_a_page_resolves(page: Path) -> None:
    assert _broken_links(page) == []


def test_every_page_anchor_named_in_prose_exists() -> None:
    files = [p for root in PROSE for p in ([root] if root.is_file() else root.rglob("*"))
             if p.is_file() and p.suffix in {".py", ".md", ".sql", ".yaml", ".sh", ".json"}]
    broken = []
    for path in files:
        for name, anchor in _NAMED.findall(path.read_text(encoding="utf-8", errors="replace")):
            page = ROOT / name if name.startswith("docs/") else ROOT / "docs" / name
            if page.exists() and anchor not in anchors(page):
                broken.append(f"{path.relative_to(ROOT)}: {name}#{anchor}")
    assert broken == []


def test_the_slug_is_githubs() -> None:
    assert slug("The run of 2026-12-05, 05:17 UTC (e10a860)") == "the-run-of-2026-12-05-0517-utc-e10a860"
    assert slug("First token over the gateway's SSE (`--only sse`)") == "first-token-over-the-gateways-sse---only-sse"
    assert slug("Peer comparison → a 2× figure") == "peer-comparison--a-2-figure"
