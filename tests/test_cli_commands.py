"""The ``om`` command line loads only the command it runs (``om/cli/__init__.py``):
a shell call or a node start does not import the bench, chaos or the server's stack
it does not use, and ``om --help`` still lists every command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from om.cli import COMMANDS, main

HEAVY = ("bench", "om.chaos", "om.node", "om.cli.bench", "om.cli.chaos")


def _imported_after(command: str) -> list[str]:
    """The heavy modules imported by building the parser of ``command`` (a fresh
    interpreter: this one has imported everything already)."""
    code = (f"import json, sys; from om.cli import parser; parser({command!r}); "
            f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({HEAVY!r}))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    imported: list[str] = json.loads(done.stdout)
    return imported


@pytest.mark.parametrize("command", ["sh", "fs", "admin"])
def test_a_client_command_imports_neither_the_bench_nor_the_server(command: str) -> None:
    assert _imported_after(command) == []


def test_serve_imports_the_node_but_not_the_bench() -> None:
    imported = _imported_after("serve")
    assert "om.node.node" in imported
    assert not [m for m in imported if m.startswith(("bench", "om.chaos", "om.cli.bench"))]


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)


def test_a_misspelled_command_names_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["shh", "volume", "list"])
    assert exited.value.code == 2
    assert "invalid choice: 'shh'" in capsys.readouterr().err
