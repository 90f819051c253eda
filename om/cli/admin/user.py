"""``om admin user add | revoke | list``: users' client certificates, for administrators
(``om/cluster/users.py`` does the work,
``om/executor/security/user_certificates.py`` has the rules).

    om admin user add alice [--groups dev,ops] [--days 365]   # prints the two files
    om admin user revoke bob                                   # every node refuses them
    om admin user list [--json]

The cluster is found as for every ``om admin`` command (``--om``, ``--config``, ``--dir``,
else the last cluster started); ``add`` also needs the cluster's CA key, in the
directory of the configuration's ``ca_file`` (``DIR/tls`` for ``om cluster up``), so it
runs where the cluster was set up. The tool acts as its certificate's user, who must be
an administrator.

Exit status: 0 done, 1 refused by the cluster (its status and message on one line), 2 a
usage or configuration error.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict

from om import config as om_config
from om.cli.common import add_target, client_tls, render_rows, targets
from om.client import OMConnectionError, OMStatusError
from om.cluster import lifecycle as om_cluster
from om.cluster import users
from om.config import ConfigError, ServerConfig
from om.executor.security.user_certificates import name_problem
from om.protocol import om_pb2
from om.protocol.token_format import instant


def register(actions: Any) -> None:
    """Adds ``user add``, ``user revoke`` and ``user list`` under ``om admin``."""
    user = actions.add_parser("user", help="users' client certificates: add, revoke, list "
                              "(administrators only)").add_subparsers(
        dest="user_action", required=True)
    add = user.add_parser("add", help="issue a client certificate for a user, signed by the "
                          "cluster's CA (its key and certificate: mode 0600)")
    add.add_argument("name", help="the user: the certificate's CN")
    add.add_argument("--groups", type=_groups, default=(), metavar="G1,G2",
                     help="the user's groups for the ACLs (the certificate's OU entries; "
                          "the first is its primary group unless the group mapping has one)")
    add.add_argument("--days", type=int, default=365, help="how long it is valid (default 365)")
    revoke = user.add_parser("revoke", help="refuse every certificate of a user from now on, "
                             "on every node")
    revoke.add_argument("name")
    listing = user.add_parser("list", help="the certificates on record, revoked ones too")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    for parser, run in ((add, run_add), (revoke, run_revoke), (listing, run_list)):
        add_target(parser)
        parser.add_argument("--timeout", type=float, default=30.0)
        parser.set_defaults(run=run)


def _groups(text: str) -> tuple[str, ...]:
    groups = tuple(group.strip() for group in text.split(",") if group.strip())
    for group in groups:
        problem = name_problem(group, "group")
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
    return groups


def _failed(args: argparse.Namespace, error: Exception) -> int:
    """Prints a refusal or failure on one line; the exit status."""
    name = f"om admin user {args.user_action}"
    if isinstance(error, OMStatusError):
        print(f"{name}: {error.status_name} {error.message}", file=sys.stderr)
        return 1
    if isinstance(error, OMConnectionError):
        print(f"{name}: {error}", file=sys.stderr)
        return 1
    print(f"{name}: {error}", file=sys.stderr)
    return 2


def _cluster_config(args: argparse.Namespace, addresses: list[str]) -> ServerConfig:
    """The configuration of the targeted cluster (for its CA)."""
    if args.config or args.dir:
        return om_config.load(args.config or args.dir / "cluster.toml")
    cluster = om_cluster.serving(addresses)
    if cluster is None:
        raise ConfigError("cannot tell which cluster serves "
                          f"{','.join(addresses)} (its CA issues the certificate): give "
                          "--dir DIR of the cluster or --config")
    return cluster.config


def run_add(args: argparse.Namespace) -> int:
    """Issues, records and writes a certificate; prints where the files are."""
    try:
        problem = name_problem(args.name, "user")
        if problem is not None or args.days <= 0:
            raise ConfigError(problem or f"--days must be positive, not {args.days}")
        addresses = targets(args)
        config = _cluster_config(args, addresses)
        if not config.tls.enabled:
            raise ConfigError("the cluster serves clients without TLS: a user is a client "
                              "certificate, so there is none to issue (om cluster up without "
                              "--no-tls)")
        ca_directory = Path(config.tls.ca_file).parent
        issued, row = users.add(ca_directory, addresses, client_tls(args, addresses),
                                args.name, args.groups, datetime.timedelta(days=args.days),
                                args.timeout)
    except (ConfigError, OSError, OMStatusError, OMConnectionError) as error:
        return _failed(args, error)
    groups = ",".join(row.groups) or "none"
    print(f"user {row.user}: certificate serial {row.serial}, groups {groups}, valid until "
          f"{instant(row.not_after)}, recorded by {row.issued_by}")
    print(f"  certificate: {issued.cert_file} (mode 0600)")
    print(f"  key:         {issued.key_file} (mode 0600)")
    print(f"  CA:          {config.tls.ca_file}")
    print(f"give them to {row.user}: om sh --om {','.join(addresses)} --cert "
          f"{issued.cert_file} --key {issued.key_file} --ca {config.tls.ca_file} ...")
    return 0


def run_revoke(args: argparse.Namespace) -> int:
    """Revokes a user's certificates; prints which."""
    try:
        problem = name_problem(args.name, "user")
        if problem is not None:
            raise ConfigError(problem)
        addresses = targets(args)
        revoked = users.revoke(addresses, client_tls(args, addresses), args.name, args.timeout)
    except (ConfigError, OMStatusError, OMConnectionError) as error:
        return _failed(args, error)
    if not revoked:
        print(f"user {args.name}: every certificate on record was revoked already")
    for row in revoked:
        print(f"user {row.user}: revoked the certificate serial {row.serial} (recorded "
              f"{instant(row.issued_at)} by {row.issued_by}); every node refuses it once it "
              "applied this")
    return 0


def _state(row: om_pb2.UserCertificate, now_ms: int) -> str:
    if row.revoked_at:
        return f"REVOKED {instant(row.revoked_at)} by {row.revoked_by}"
    return "EXPIRED" if row.not_after < now_ms else "VALID"


def run_list(args: argparse.Namespace) -> int:
    """Prints the certificates on record."""
    try:
        addresses = targets(args)
        rows, left_out = users.certificates(addresses, client_tls(args, addresses),
                                            args.timeout)
    except (ConfigError, OMStatusError, OMConnectionError) as error:
        return _failed(args, error)
    if args.json:
        print(json.dumps([MessageToDict(row, preserving_proto_field_name=True)
                          for row in rows], indent=2))
    else:
        now_ms = int(datetime.datetime.now(datetime.UTC).timestamp() * 1000)
        print(render_rows(("user", "groups", "serial", "not_after", "state", "issued_by"),
                          [[row.user, ",".join(row.groups) or "-", row.serial,
                            instant(row.not_after), _state(row, now_ms), row.issued_by]
                           for row in rows]))
    if left_out:
        print(f"om admin user list: only the first {len(rows)} certificates are listed",
              file=sys.stderr)
    return 0
