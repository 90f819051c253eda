"""The ``om`` command: serve, sh (like ``ozone sh``: ``sh/``), fs (like ``ozone fs``:
``fs/``), admin (``admin/``), cluster, freon, bench, chaos."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

from om.client import OMTlsError

Commands = Any   # argparse's subparsers action (its type is private)


def _module_command(module: str) -> Callable[[Commands], None]:
    """A command whose module registers it (``register(commands)``), imported only when
    the command line names it."""
    def register(commands: Commands) -> None:
        importlib.import_module(module).register(commands)
    return register


def _admin(commands: Commands) -> None:
    from om.cli.admin import audit, membership, roles, transfer, upgrade, user, verify
    admin_actions = commands.add_parser(
        "admin", help="administration (like `ozone admin om`)").add_subparsers(
        dest="action", required=True)
    roles.register(admin_actions)
    verify.register(admin_actions)
    audit.register(admin_actions)
    user.register(admin_actions)
    ring_actions = admin_actions.add_parser(
        "om", help="the OM ring: leadership transfer, membership, prepare and "
        "upgrade").add_subparsers(dest="om_action", required=True)
    transfer.register(ring_actions)
    membership.register(ring_actions)
    upgrade.register(ring_actions)


# Every command, in the order ``om --help`` lists them. A command's modules are imported
# only when it runs (or for ``om --help``): ``om sh`` and ``om serve`` do not pay for
# the bench's and chaos' imports (`om sh --help`: 1.74 s of CPU before, 0.59 s after).
COMMANDS: dict[str, Callable[[Commands], None]] = {
    "serve": _module_command("om.cli.serve"),
    "sh": _module_command("om.cli.sh.shell"),
    "fs": _module_command("om.cli.fs.shell"),
    "admin": _admin,
    "cluster": _module_command("om.cli.cluster"),
    "freon": _module_command("om.cli.freon"),
    "bench": _module_command("om.cli.bench"),
    "chaos": _module_command("om.cli.chaos"),
}


def parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser: of ``command`` alone when it is one (a command module
    imports ``om.cli.common`` and never another command), else of every command (for
    ``om --help``, or to name the choices of a misspelled one)."""
    root = argparse.ArgumentParser(prog="om", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, register in COMMANDS.items():
        if command not in COMMANDS or name == command:
            register(commands)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the process exit status (1, with one line, when
    the tool's TLS settings cannot work with the OM it reached)."""
    words = normalize(list(sys.argv[1:] if argv is None else argv))
    args = parser(words[0] if words else None).parse_args(words)
    try:
        status: int = args.run(args)
    except OMTlsError as error:
        print(f"om {args.command}: {error}", file=sys.stderr)
        return 1
    return status


def normalize(words: list[str]) -> list[str]:
    """``om fs -mkdir ...`` (HDFS's spelling) as ``om fs mkdir ...``."""
    if not words or words[0] != "fs":
        return words
    from om.cli.fs.shell import normalize as fs_normalize
    return fs_normalize(words)


if __name__ == "__main__":
    sys.exit(main())
