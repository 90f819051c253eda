"""The architecture, as import rules.

* The core stays sans-IO: gatekeeper and executor (and integrity's merkle and
  auditor) import no asyncio, threads, sockets, pysyncobj or rocksdict, not
  even indirectly through om modules.
* Only ``om/consensus/pysyncobj/`` imports pysyncobj; only ``om/statemachine/``
  imports rocksdict.
* ``om/consensus/`` sees entries and snapshots as opaque bytes: it imports only
  ``om.config``, ``om.observe`` and itself (the node passes apply and snapshots in).
* The flows (``om/flows/``) use consensus through its port, never the adapter;
  the state machine imports neither consensus nor the flows.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import om

ROOT = Path(om.__file__).parent
FORBIDDEN = {"asyncio", "pysyncobj", "rocksdict", "uvloop", "socket", "threading"}
CORE_PACKAGES = ("gatekeeper", "executor")
# modules outside the core packages that must stay sans-IO too
SANS_IO_MODULES = ("integrity/merkle.py", "integrity/auditor.py")
# package -> the om modules (prefixes) it may import
ALLOWED = {
    "consensus": ("om.config", "om.consensus", "om.observe", "om.disk"),
    "observe": ("om.observe",),   # a leaf: anything may count and log through it
    "integrity": ("om.schema", "om.statemachine", "om.executor", "om.protocol", "om.integrity",
                  "om.disk"),
}
# package -> the om modules (prefixes) it must not import
DENIED = {
    "flows": ("om.consensus.pysyncobj", "om.consensus.local", "om.node"),
    "statemachine": ("om.consensus", "om.flows", "om.node"),
    "executor": ("om.flows", "om.consensus", "om.node"),
    "gatekeeper": ("om.flows", "om.consensus", "om.node"),
}
# third-party module -> the only package that may import it
OWNER = {"pysyncobj": "consensus/pysyncobj", "rocksdict": "statemachine"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
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


def _om_imports(path: Path) -> set[str]:
    return {m for m in _imports(path) if m.split(".")[0] == "om"}


def _package_files(package: str) -> list[Path]:
    files = list((ROOT / package).rglob("*.py"))
    assert files, f"om/{package} has no modules"
    return files


def test_core_packages_import_no_io() -> None:
    core_files = [p for pkg in CORE_PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    core_files += [ROOT / module for module in SANS_IO_MODULES]
    assert len(core_files) > 10
    for path in core_files:
        for module_path, imported in _closure(path).items():
            bad = {m for m in imported if m.split(".")[0] in FORBIDDEN}
            assert not bad, f"{path.relative_to(ROOT)} reaches {sorted(bad)} via {module_path}"


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_packages_import_only_what_they_may(package: str) -> None:
    for path in _package_files(package):
        bad = {m for m in _om_imports(path) if not m.startswith(ALLOWED[package])}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


@pytest.mark.parametrize("package", sorted(DENIED))
def test_packages_do_not_import_across_the_layers(package: str) -> None:
    for path in _package_files(package):
        bad = {m for m in _om_imports(path) if m.startswith(DENIED[package])}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


@pytest.mark.parametrize("library", sorted(OWNER))
def test_each_library_has_one_owner(library: str) -> None:
    for path in ROOT.rglob("*.py"):
        if library in {m.split(".")[0] for m in _imports(path)}:
            owner = path.relative_to(ROOT).as_posix()
            assert owner.startswith(OWNER[library] + "/"), f"{owner} imports {library}"


def test_the_checks_detect_a_forbidden_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import asyncio\nfrom rocksdict import Rdict\nfrom om.flows import x\n")
    assert {"asyncio", "rocksdict", "om.flows.x"} <= _imports(sample)
    assert "om.flows.x" in _om_imports(sample)
