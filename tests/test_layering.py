"""The core stays sans-IO: gatekeeper and executor import no asyncio, pysyncobj or rocksdict,
not even indirectly through the om modules they import."""

from __future__ import annotations

import ast
from pathlib import Path

import om

ROOT = Path(om.__file__).parent
FORBIDDEN = {"asyncio", "pysyncobj", "rocksdict", "uvloop", "socket", "threading"}
CORE_PACKAGES = ("gatekeeper", "executor")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def _module_path(module: str) -> Path | None:
    parts = module.split(".")
    if parts[0] != "om":
        return None
    base = ROOT.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _closure(start: Path) -> dict[Path, set[str]]:
    seen: dict[Path, set[str]] = {}
    todo = [start]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen[path] = _imports(path)
        for module in seen[path]:
            target = _module_path(module)
            if target is not None:
                todo.append(target)
    return seen


def test_core_packages_import_no_io() -> None:
    core_files = [p for pkg in CORE_PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    assert len(core_files) > 10
    for path in core_files:
        for module_path, imported in _closure(path).items():
            bad = {m for m in imported if m.split(".")[0] in FORBIDDEN}
            assert not bad, f"{path.relative_to(ROOT)} reaches {sorted(bad)} via {module_path}"


def test_the_check_detects_a_forbidden_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import asyncio\nfrom rocksdict import Rdict\n")
    assert {"asyncio", "rocksdict"} <= _imports(sample)
