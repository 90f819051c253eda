"""Every module and name docs/ARCHITECTURE.md points a newcomer to exists.

The page is read to find a request's handler, lock plan and apply path; a name that
moved sends the reader nowhere. Read from the page:

* **paths** in inline code under the repository's trees (``om/executor/registry.py``,
  ``om/integrity/``, ``tests/test_layering.py``), with brace lists expanded
  (``om/node/{transfer,membership}.py``): each must exist, and be a folder when it
  ends in ``/``;
* **bare module names** (``create_key.py``, ``{commit,delete}_key.py``), as the
  request table gives handlers: each must be a module somewhere in those trees;
* **a name after a path** (``om/executor/registry.py`` ``KINDS``,
  ``om/node/node.py`` ``Node.apply_entry``): the module must define it (a ``def``,
  ``class`` or assignment of its last part; a dotted name's class too).

Patterns (``*_delegation_token.py``, ``<type>.py``) are not names and are skipped.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "ARCHITECTURE.md"

TREES = ("om/", "bench/", "tests/", "spark_analysis/", "scripts/")
CODE = re.compile(r"`([^`\n]+)`")
NAME_AFTER = re.compile(r"`([\w/{},.-]+\.py)`\s+`([A-Za-z_][\w.]*)`")
BRACES = re.compile(r"\{([^{}]*)\}")


def expand(text: str) -> list[str]:
    """``a/{b,c}.py`` -> ``a/b.py``, ``a/c.py`` (every brace list, in order)."""
    parts = BRACES.split(text)
    literal, choices = parts[0::2], [p.split(",") for p in parts[1::2]]
    return [
        "".join(itertools.chain.from_iterable(zip(literal, combo, strict=False))) + literal[-1]
        for combo in itertools.product(*choices)
    ]


def named_paths(text: str) -> tuple[set[str], set[str]]:
    """(repository paths, bare module names) named in the page's inline code."""
    paths: set[str] = set()
    bare: set[str] = set()
    for snippet in CODE.findall(text):
        if any(ch in snippet for ch in " *<>()"):
            continue
        for name in expand(snippet):
            if name.startswith(TREES):
                paths.add(name)
            elif re.fullmatch(r"\w+\.py", name):
                bare.add(name)
    return paths, bare


def defines(module: Path, dotted: str) -> bool:
    """Whether ``module`` defines each part of ``dotted`` (``Node.apply_entry``)."""
    source = module.read_text(encoding="utf-8")
    return all(
        re.search(rf"^\s*(?:async\s+def|def|class)\s+{re.escape(part)}\b", source, re.M)
        or re.search(rf"^\s*{re.escape(part)}\s*(?::[^=\n]*)?=", source, re.M)
        for part in dotted.split(".")
    )


def missing_names(text: str, root: Path = ROOT) -> list[str]:
    """What the page names that the repository under ``root`` does not hold."""
    paths, bare = named_paths(text)
    problems = [
        f"{p}: no such {'folder' if p.endswith('/') else 'file'}"
        for p in sorted(paths)
        if not ((root / p).is_dir() if p.endswith("/") else (root / p).exists())
    ]
    modules = {p.name for tree in TREES for p in (root / tree).rglob("*.py")}
    problems += [f"{b}: no module of that name in the trees" for b in sorted(bare - modules)]
    for path_text, dotted in NAME_AFTER.findall(text):
        for path in expand(path_text):
            module = root / path
            if path.startswith(TREES) and module.is_file() and not defines(module, dotted):
                problems.append(f"{path} {dotted}: not defined there")
    return problems


def test_every_module_and_name_the_architecture_page_names_exists() -> None:
    assert missing_names(PAGE.read_text(encoding="utf-8")) == []


def test_the_page_names_a_handler_lock_plan_and_apply_path() -> None:
    """What a newcomer looks for is named, so the check above has it to read."""
    paths, _ = named_paths(PAGE.read_text(encoding="utf-8"))
    assert {
        "om/executor/registry.py",
        "om/gatekeeper/lock_plan.py",
        "om/gatekeeper/fs_locks.py",
        "om/statemachine/apply.py",
        "om/statemachine/replicated_apply.py",
    } <= paths
    assert len(paths) > 40


def test_a_missing_module_folder_or_name_is_reported(tmp_path: Path) -> None:
    """Red case: a small tree and a page that names what is there and what is not."""
    (tmp_path / "om" / "executor" / "handlers").mkdir(parents=True)
    (tmp_path / "om" / "executor" / "registry.py").write_text(
        "KINDS = {}\n\n\nclass Node:\n    def apply_entry(self):\n        pass\n"
    )
    (tmp_path / "om" / "executor" / "handlers" / "create_key.py").write_text("")
    page = (
        "`om/executor/registry.py` `KINDS`, `om/executor/registry.py` `Node.apply_entry`,\n"
        "`om/executor/` and `om/executor/handlers/create_key.py`, `create_key.py`,\n"
        "`*_token.py`, `<type>.py`, `om sh key put`;\n"
        "`om/executor/{registry,fso_keys}.py`, `om/flows/`, `{create,rename}_key.py`,\n"
        "`om/executor/registry.py` `plan_locks`\n"
    )
    assert missing_names(page, root=tmp_path) == [
        "om/executor/fso_keys.py: no such file",
        "om/flows/: no such folder",
        "rename_key.py: no module of that name in the trees",
        "om/executor/registry.py plan_locks: not defined there",
    ]


def test_brace_lists_expand_in_order() -> None:
    assert expand("om/node/{transfer,membership}.py") == [
        "om/node/transfer.py",
        "om/node/membership.py",
    ]
    assert expand("{a,b}_{x,y}.py") == ["a_x.py", "a_y.py", "b_x.py", "b_y.py"]
    assert expand("om/config.py") == ["om/config.py"]
