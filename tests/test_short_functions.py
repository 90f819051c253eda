"""No function in ``om/`` runs over ``LINES_MAX`` lines (issue 34: short functions,
one concept each), counted from its ``def`` to its last line, docstring included."""

from __future__ import annotations

import ast
from pathlib import Path

import om

ROOT = Path(om.__file__).parent
LINES_MAX = 60


def long_functions(source: str, name: str) -> list[str]:
    """``name:function lines`` for each function of ``source`` over ``LINES_MAX``."""
    return [f"{name}:{node.name} {node.end_lineno - node.lineno + 1}"
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.end_lineno is not None and node.end_lineno - node.lineno + 1 > LINES_MAX]


def test_no_function_in_om_is_over_the_limit() -> None:
    found = [hit for path in sorted(ROOT.rglob("*.py")) if not path.name.endswith("_pb2.py")
             for hit in long_functions(path.read_text(), str(path.relative_to(ROOT)))]
    assert found == []


def test_a_long_function_is_found() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(LINES_MAX))
    assert long_functions(f"async def f():\n{body}", "m.py") == [f"m.py:f {LINES_MAX + 1}"]
    assert long_functions(f"def f():\n{body[:-len('    x59 = 59')-1]}", "m.py") == []
