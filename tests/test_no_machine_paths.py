"""The repository speaks only of itself: no path of one machine, no folder beside it.

Docs and code that name a data directory of the machine they were written on
(``/work/...``) or a folder next to the checkout (``../shared/...``) send a reader
to something a fresh clone does not have. The trees read are what a clone ships:
the docs (README.md, CHANGELOG.md, docs/), the product (om/), the benchmarks and
analysis (bench/, spark_analysis/), the scripts and the tests themselves. A
measurement's data lives under a placeholder (``SEED_DB``) and the command that
makes it; a source is named by its public name (an Ozone issue, a project's docs).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# '/work/' only where a path starts (a space, quote, backtick, paren or line start
# before it), so that words such as "network/work/" never match; '../shared' anywhere.
FORBIDDEN = re.compile(r"(?:(?<![\w.-])/work/|\.\./shared\b|(?<![\w/.-])shared/reference/)")
TREES = ("docs", "om", "bench", "spark_analysis", "scripts", "tests")
SUFFIXES = {".md", ".py", ".sh", ".toml", ".json", ".txt"}


def files() -> list[Path]:
    """The files read: the top-level docs and every text file of the trees above."""
    found = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "pyproject.toml"]
    for tree in TREES:
        found += [p for p in sorted((ROOT / tree).rglob("*")) if p.suffix in SUFFIXES]
    return [p for p in found if p.is_file() and p != Path(__file__).resolve()]


def machine_references(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: text`` for each line of a file that names a machine's path."""
    text = path.read_text(encoding="utf-8", errors="replace")
    return [
        f"{path.relative_to(root)}:{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), 1)
        if FORBIDDEN.search(line)
    ]


def test_no_doc_or_module_names_a_path_of_one_machine() -> None:
    problems = [p for path in files() for p in machine_references(path)]
    assert problems == []


def test_the_check_reads_the_docs_and_the_code() -> None:
    read = {p.relative_to(ROOT).parts[0] for p in files()}
    assert {"README.md", "CHANGELOG.md", "docs", "om", "bench", "tests"} <= read


def test_a_machine_path_and_a_folder_beside_the_repository_are_reported(tmp_path: Path) -> None:
    """Red case: each forbidden form is found, the harmless look-alikes are not."""
    page = tmp_path / "page.md"
    page.write_text(
        "seeded from /work/bench10m/data/om1/db\n"
        "see ../shared/DESIGN.md\n"
        "(shared/reference/ozone-om.md, section 3)\n"
        "`om bench --out /tmp/run1` and docs/operations/verify-and-repair.md\n"
        "the network/work/queue and a shared/ folder of the repository\n",
        encoding="utf-8",
    )
    assert [p.split(": ", 1)[0] for p in machine_references(page, root=tmp_path)] == [
        "page.md:1",
        "page.md:2",
        "page.md:3",
    ]
