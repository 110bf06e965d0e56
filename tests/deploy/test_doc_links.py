"""Every relative link in README.md, CHANGELOG.md and docs/**/*.md resolves: the file exists,
and an anchor (``#…``) names a heading of that file by GitHub's slug rule. Code blocks are not
read, and links with a scheme (``https:``, ``mailto:``) are left to the reader."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md")])
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#+ (.+)$", re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """A file's heading anchors; a repeated heading's gets ``-1``, ``-2``, … as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        s = slug(heading)
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def broken_links(doc: Path) -> list[str]:
    bad = []
    for target in LINK.findall(FENCE.sub("", doc.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.is_file() and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor}")
    return bad


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    assert not broken_links(doc), broken_links(doc)


def test_the_check_sees_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Title\n\n## A section\n", encoding="utf-8")
    doc = tmp_path / "b.md"
    doc.write_text(
        "[ok](a.md#a-section) [web](https://example.org/x) [gone](c.md) [anchor](a.md#nope)\n"
        "```\n[in code](missing.md)\n```\n",
        encoding="utf-8",
    )
    assert broken_links(doc) == ["c.md: no such file", "a.md#nope: no heading #nope"]
