"""Every relative link in the docs leads somewhere: README.md, CHANGELOG.md, docs/**.

A link ``[text](path)`` or ``[text](path#anchor)`` whose target is not a URL must
name a file or folder that exists, relative to the page that holds it; with an
anchor into a markdown page (or ``(#anchor)`` into the page itself), the anchor
must be the slug of one of that page's headings, by GitHub's rules: the heading's
text (inline code, emphasis and link syntax dropped), lower-cased, every character
that is not a letter, digit, space, ``-`` or ``_`` removed, spaces turned into
``-``; a repeated slug gets ``-1``, ``-2`` ... in order. Links inside fenced code
blocks and inline code are text, not links, and are not read.

Why: the docs are split into pages that point at each other (docs/OPERATIONS.md is
an index of docs/operations/); a page renamed or a heading reworded must fail here,
not leave a reader at a dead link.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^ {0,3}(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def pages() -> list[Path]:
    """The pages checked: README.md, CHANGELOG.md and every markdown file under docs/."""
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, inline code blanked."""
    out: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, INLINE_CODE.sub(lambda m: " " * len(m.group(0)), line)))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (before de-duplication)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "")
    text = re.sub(r"(\*+|(?<!\w)_+|_+(?!\w))", "", text)  # emphasis markers, not snake_case
    text = text.strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor GitHub gives the headings of a markdown page."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match is None:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """``page:line: target (why)`` for each relative link of a page that leads nowhere."""
    problems: list[str] = []
    for number, line in prose_lines(page.read_text(encoding="utf-8")):
        for match in LINK.finditer(line):
            target = match.group(1)
            if URL.match(target):
                continue
            path_part, _, anchor = target.partition("#")
            dest = (page.parent / path_part).resolve() if path_part else page
            where = f"{page.relative_to(root)}:{number}: {target}"
            if not dest.exists():
                problems.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{where} (no heading with anchor #{anchor})")
    return problems


def test_every_relative_link_in_the_docs_leads_to_a_file_and_heading() -> None:
    problems = [p for page in pages() for p in broken_links(page)]
    assert problems == []


def test_the_docs_hold_relative_links_to_check() -> None:
    """The check reads something: the operations index alone links 16 pages."""
    links = sum(
        len(LINK.findall(line)) for page in pages() for _, line in prose_lines(page.read_text())
    )
    assert links > 100


def test_a_broken_file_link_and_a_broken_anchor_are_reported(tmp_path: Path) -> None:
    """Red case: a page beside a real one, in a tree of its own."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "OPERATIONS.md").write_text("# Operations\n\n## Add a node\n", encoding="utf-8")
    page = docs / "page.md"
    page.write_text(
        "# A `page` for *the* test\n\n"
        "[fine](OPERATIONS.md) [fine too](#a-page-for-the-test) [and](OPERATIONS.md#add-a-node)\n"
        "[gone](operations/no-such-page.md)\n"
        "[bad anchor](OPERATIONS.md#no-such-heading)\n"
        "[bad self anchor](#nowhere) `[code](not-a-link.md)`\n"
        "```\n[fenced](not-a-link-either.md)\n```\n",
        encoding="utf-8",
    )
    assert broken_links(page, root=tmp_path) == [
        "docs/page.md:4: operations/no-such-page.md (no such file)",
        "docs/page.md:5: OPERATIONS.md#no-such-heading (no heading with anchor #no-such-heading)",
        "docs/page.md:6: #nowhere (no heading with anchor #nowhere)",
    ]


def test_slugs_follow_githubs_rules() -> None:
    assert slug("Membership: add, decommission, maintenance") == (
        "membership-add-decommission-maintenance"
    )
    assert slug("OM snapshots (`om sh snapshot`)") == "om-snapshots-om-sh-snapshot"
    assert slug("What digests, verify and the scrub cost") == (
        "what-digests-verify-and-the-scrub-cost"
    )
    assert slug("The `retry_cache` table") == "the-retry_cache-table"
    assert slug("Native ACLs (on with `om cluster up`)") == "native-acls-on-with-om-cluster-up"
