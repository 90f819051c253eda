"""The ``om`` command: serve, sh (like ``ozone sh``), fs (like ``ozone fs``), admin, cluster,
freon, bench, chaos."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from om.cli import (
    admin,
    admin_membership,
    admin_transfer,
    admin_upgrade,
    admin_user,
    audit,
    bench,
    chaos,
    cluster,
    freon,
    fs,
    serve,
    sh,
    verify,
)
from om.client import OMTlsError


def parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand: the one place commands are registered
    (a command module imports ``om.cli.common`` and never another command)."""
    root = argparse.ArgumentParser(prog="om", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve.register(commands)
    sh.register(commands)
    fs.register(commands)
    admin_actions = commands.add_parser(
        "admin", help="administration (like `ozone admin om`)").add_subparsers(
        dest="action", required=True)
    admin.register(admin_actions)
    verify.register(admin_actions)
    audit.register(admin_actions)
    admin_user.register(admin_actions)
    ring_actions = admin_actions.add_parser(
        "om", help="the OM ring: leadership transfer, membership, prepare and "
        "upgrade").add_subparsers(dest="om_action", required=True)
    admin_transfer.register(ring_actions)
    admin_membership.register(ring_actions)
    admin_upgrade.register(ring_actions)
    cluster.register(commands)
    freon.register(commands)
    bench.register(commands)
    chaos.register(commands)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the process exit status (1, with one line, when
    the tool's TLS settings cannot work with the OM it reached)."""
    args = parser().parse_args(fs.normalize(sys.argv[1:] if argv is None else argv))
    try:
        status: int = args.run(args)
    except OMTlsError as error:
        print(f"om {args.command}: {error}", file=sys.stderr)
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
