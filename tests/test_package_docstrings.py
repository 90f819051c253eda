"""A package's docstring lists every module it holds (issue 34: docstrings that say
what is there). Checked where a package's docstring is the map of its modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAPPED = ("om/node", "om/executor", *(f"om/executor/{family}" for family in (
    "volumes", "buckets", "keys", "fso", "multipart", "om_snapshots", "acls", "security", "admin")),
          "om/cli/sh", "om/cli/admin", "om/cli/fs", "om/statemachine")


@pytest.mark.parametrize("package", MAPPED)
def test_the_docstring_names_every_module(package: str) -> None:
    folder = ROOT / package
    docstring = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    modules = sorted(p.name for p in folder.glob("*.py") if p.name != "__init__.py")
    missing = [name for name in modules if f"``{name}``" not in docstring]
    assert not missing, f"{package}/__init__.py does not name {missing}"
