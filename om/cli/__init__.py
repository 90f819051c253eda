"""The ``om`` command: serve, sh (like ``ozone sh``), admin, cluster, freon, bench, chaos."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from om.cli import admin, bench, chaos, cluster, freon, serve, sh


def parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    root = argparse.ArgumentParser(prog="om", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve.register(commands)
    sh.register(commands)
    admin.register(commands)
    cluster.register(commands)
    freon.register(commands)
    bench.register(commands)
    chaos.register(commands)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the process exit status."""
    args = parser().parse_args(argv)
    status: int = args.run(args)
    return status


if __name__ == "__main__":
    sys.exit(main())
