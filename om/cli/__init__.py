"""The ``om`` command: serve, sh (like ``ozone sh``: ``sh/``), fs (like ``ozone fs``:
``fs/``), admin (``admin/``), cluster, freon, bench, chaos."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from om.cli import bench, chaos, cluster, freon, serve
from om.cli.admin import audit, membership, roles, transfer, upgrade, user, verify
from om.cli.fs import shell as fs_shell
from om.cli.sh import shell as sh_shell
from om.client import OMTlsError


def parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand: the one place commands are registered
    (a command module imports ``om.cli.common`` and never another command)."""
    root = argparse.ArgumentParser(prog="om", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve.register(commands)
    sh_shell.register(commands)
    fs_shell.register(commands)
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
    cluster.register(commands)
    freon.register(commands)
    bench.register(commands)
    chaos.register(commands)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the process exit status (1, with one line, when
    the tool's TLS settings cannot work with the OM it reached)."""
    args = parser().parse_args(fs_shell.normalize(sys.argv[1:] if argv is None else argv))
    try:
        status: int = args.run(args)
    except OMTlsError as error:
        print(f"om {args.command}: {error}", file=sys.stderr)
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
