"""``om sh``: the namespace shell, as ``ozone sh``.

    om sh volume create|info|list|ls|update|delete|setquota|clrquota /vol
    om sh bucket create|info|list|ls|delete|setquota|clrquota /vol/bucket
    om sh key put|info|list|ls|delete|rename /vol/bucket/key
    om sh key get|cat|cp|checksum|rewrite ...   -> not supported: metadata only
    om sh volume|bucket|key addacl|removeacl|setacl ADDRESS -a type:name:rights[SCOPE][,...]
    om sh volume|bucket|key getacl ADDRESS [--json|--no-json]
    om sh prefix addacl|removeacl|setacl|getacl ...   -> not supported: no prefix ACLs
    om sh token get [-r RENEWER] -t FILE | renew -t FILE | cancel -t FILE | print -t FILE
    om sh snapshot create /vol/bucket [NAME] | list /vol/bucket | info|delete /vol/bucket NAME
    om sh snapshot diff /vol/bucket FROM [TO]   keys created, deleted, modified, renamed
    om sh key info|list /vol/bucket/.snapshot/NAME/...   read a snapshot (om/cli/sh/snapshot.py)
    om sh --token FILE ...   act as a delegation token's owner, without a certificate
    om sh --dir DIR ...      the cluster in DIR (om cluster up --dir), with its certificate

Addresses, flags, output and exit codes follow Ozone's shell (see
docs/ozone-shell-compat.md): ``[o3://host:port]/vol/bucket/key``, leading and
trailing slashes as Ozone takes them; ACLs are Ozone's ``user:bob:rw``,
``group:dev:a[DEFAULT]``, ``world::r`` (rights r w c l d x y a n, a malformed
one exits 2 and sends nothing); every list takes ``--prefix/-p``,
``--start/-s`` (exclusive), ``--length/-l`` (default 100) or ``--all/-a``.
JSON is printed as Ozone's Jackson mapper prints it. A failed command prints
Ozone's status name and message (``KEY_NOT_FOUND Key ... not found``) and
exits 255; a malformed command line exits 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from om.cli.common import (
    add_dir_flag,
    add_tls_flags,
    add_token_flag,
    client_credentials,
    target_addresses,
    token_credentials,
)
from om.cli.sh import commands as do
from om.cli.sh import snapshot as sh_snapshot
from om.cli.sh import token as sh_token
from om.cli.sh.address import parse_address
from om.cli.sh.options import ShellError, UsageError
from om.client import OMClient, OMConnectionError, OMStatusError
from om.client.identity import DEFAULT_ADDRESS, split_addresses
from om.client.retry_policy import RetryPolicy
from om.config import ConfigError
from om.protocol import acls

EXIT_USAGE = 2
EXIT_FAILED = 255  # Ozone's shell exits -1 on an execution error
_LAYOUTS = {"fso": "FILE_SYSTEM_OPTIMIZED", "obs": "OBJECT_STORE"}
_LAYOUT_NAMES = ("FILE_SYSTEM_OPTIMIZED", "OBJECT_STORE", "LEGACY")
_URI_HELP = {"volume": "/vol", "bucket": "/vol/bucket", "key": "/vol/bucket/key",
             "volume_or_bucket": "/vol or /vol/bucket"}

Command = Callable[[OMClient, argparse.Namespace, Any], None]


def register(commands: Any) -> None:
    """Adds the ``sh`` subcommand."""
    p = commands.add_parser("sh", help="volume, bucket and key commands (like `ozone sh`)",
                            description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--om", help="comma-separated OM addresses (default: the cluster of "
                   "--dir, else $OM_ADDRESS, else 127.0.0.1:9862); an o3://host:port address "
                   "overrides it")
    add_dir_flag(p)
    p.add_argument("--user", help="the user to act as (default: the login name)")
    p.add_argument("--timeout", type=float, default=30.0, help="overall deadline in seconds")
    add_tls_flags(p)
    add_token_flag(p)
    p.add_argument("--read-mode", choices=("linearizable", "local"), default="linearizable",
                   help="local: any node answers reads from its own state, maybe stale "
                        "(default: linearizable, confirmed by the leader)")
    p.add_argument("--verbose", action="store_true", help="create: print what was created")
    objects = p.add_subparsers(dest="object", required=True, metavar="OBJECT")
    _volume_commands(objects.add_parser("volume", aliases=["vol"], help="volume commands"))
    _bucket_commands(objects.add_parser("bucket", help="bucket commands"))
    _key_commands(objects.add_parser("key", help="key commands"))
    _prefix_commands(objects.add_parser("prefix", help="prefix ACLs (not supported)"))
    sh_token.register(objects, _command)
    sh_snapshot.register(objects, _command)
    p.set_defaults(run=run)


def _actions(parser: argparse.ArgumentParser) -> Any:
    return parser.add_subparsers(dest="verb", required=True, metavar="ACTION")


def _command(actions: Any, name: str, run_it: Command, kind: str | Callable[..., str],
             help_text: str, aliases: tuple[str, ...] = ()) -> argparse.ArgumentParser:
    """An action parser taking the address; ``kind`` says what the address must name."""
    parser: argparse.ArgumentParser = actions.add_parser(name, aliases=list(aliases),
                                                         help=help_text)
    if kind == "root":
        parser.add_argument("uri", nargs="?", default="/", help="/ (the default)")
    else:
        parser.add_argument("uri", help=_URI_HELP.get(kind, "/vol/bucket[/key]")
                            if isinstance(kind, str) else "/vol/bucket[/key]")
    parser.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS)
    parser.set_defaults(command=run_it, kind=kind)
    return parser


def _quota_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--space-quota", "--quota", dest="space_quota",
                        help="the most bytes it may use, e.g. 10GB (units B, KB, ... EB)")
    parser.add_argument("--namespace-quota", dest="namespace_quota",
                        help="the most buckets (volume) or keys (bucket)")


def _clear_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--space-quota", dest="space_quota", action="store_true",
                        help="clear the space quota")
    parser.add_argument("--namespace-quota", dest="namespace_quota", action="store_true",
                        help="clear the namespace quota")


def _list_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prefix", "-p", default="", help="only names with this prefix")
    parser.add_argument("--start", "-s", default="",
                        help="list the entries after this name (excluded)")
    limit = parser.add_mutually_exclusive_group()
    limit.add_argument("--length", "-l", type=int, default=100,
                       help="most entries to list (default 100)")
    limit.add_argument("--all", "-a", action="store_true", help="list everything")


def _delete_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-r", dest="recursive", action="store_true",
                        help="delete what it holds first")
    parser.add_argument("-y", "--yes", action="store_true", help="do not ask before -r")


def _replication_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--type", "-t", "--replication-type", dest="type",
                        help="replication type (RATIS only)")
    parser.add_argument("--replication", "-r", dest="replication",
                        help="replication factor: ONE or THREE")


def layout_name(text: str) -> str:
    """Ozone's bucket layout converter: fso, obs or a BucketLayout name, any case."""
    name = _LAYOUTS.get(text, text.upper())
    if name not in _LAYOUT_NAMES:
        raise argparse.ArgumentTypeError(f"Unknown bucket layout: {text}")
    return name


def _volume_commands(parser: argparse.ArgumentParser) -> None:
    actions = _actions(parser)
    create = _command(actions, "create", do.volume_create, "volume", "create a volume")
    create.add_argument("--user", "-u", dest="owner", metavar="USER",
                        help="its owner (default: you)")
    _quota_options(create)
    _command(actions, "info", do.volume_info, "volume", "print a volume")
    listing = _command(actions, "list", do.volume_list, "root", "list volumes", ("ls",))
    _list_options(listing)
    listing.add_argument("--user", "-u", dest="list_user", metavar="USER",
                         help="list this user's volumes (ignored with --all)")
    update = _command(actions, "update", do.volume_update, "volume", "change the owner")
    update.add_argument("--user", dest="owner", metavar="USER", help="the new owner")
    _delete_options(_command(actions, "delete", do.volume_delete, "volume", "delete a volume"))
    _quota_options(_command(actions, "setquota", do.volume_setquota, "volume", "set quotas"))
    _clear_options(_command(actions, "clrquota", do.volume_clrquota, "volume", "clear quotas"))
    _acl_commands(actions, "volume")


def _bucket_commands(parser: argparse.ArgumentParser) -> None:
    actions = _actions(parser)
    create = _command(actions, "create", do.bucket_create, "bucket", "create a bucket")
    create.add_argument("--user", "-u", dest="owner", metavar="USER",
                        help="its owner (default: you)")
    create.add_argument("--layout", "-l", type=layout_name,
                        help="obs / OBJECT_STORE (the default: flat keys) or fso / "
                             "FILE_SYSTEM_OPTIMIZED (directories; om fs)")
    _quota_options(create)
    _command(actions, "info", do.bucket_info, "bucket", "print a bucket")
    _list_options(_command(actions, "list", do.bucket_list, "volume", "list buckets", ("ls",)))
    _delete_options(_command(actions, "delete", do.bucket_delete, "bucket", "delete a bucket"))
    _quota_options(_command(actions, "setquota", do.bucket_setquota, "bucket", "set quotas"))
    _clear_options(_command(actions, "clrquota", do.bucket_clrquota, "bucket", "clear quotas"))
    _acl_commands(actions, "bucket")


def _key_commands(parser: argparse.ArgumentParser) -> None:
    actions = _actions(parser)
    put = _command(actions, "put", do.key_put, "key", "record a key (metadata only)")
    put.add_argument("file", nargs="?", help="an empty local file (om stores no data)")
    put.add_argument("--size", help="om: record this size without data, e.g. 4096 or 10MB")
    _replication_options(put)
    _command(actions, "info", do.key_info, "key", "print a key")
    _list_options(_command(actions, "list", do.key_list, "volume_or_bucket", "list keys",
                           ("ls",)))
    _command(actions, "delete", do.key_delete, "key", "delete a key")
    rename = _command(actions, "rename", do.key_rename, do.rename_kind, "rename a key")
    rename.add_argument("names", nargs="+", help="FROM TO (or TO after /vol/bucket/FROM)")
    _acl_commands(actions, "key")
    _unsupported_key_commands(actions)


def _acl_list(text: str) -> list[acls.Acl]:
    """The entries of one ``-a`` value (comma-separated), parsed as Ozone's AclOption does."""
    try:
        return acls.parse_list([text])
    except acls.AclError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _flatten(lists: list[list[acls.Acl]]) -> list[acls.Acl]:
    return [acl for values in lists for acl in values]


def _acl_commands(actions: Any, kind: str, unsupported: bool = False) -> None:
    """addacl, removeacl, setacl and getacl, with Ozone's flags (``-a/--acl/--acls``,
    the deprecated ``-al``, ``--store/-s``; getacl's ``--json``/``--no-json``)."""
    runs = {"addacl": do.acl_add, "removeacl": do.acl_remove, "setacl": do.acl_set,
            "getacl": do.acl_get}
    helps = {"addacl": "add ACLs", "removeacl": "remove ACLs",
             "setacl": "replace every ACL", "getacl": "print the ACLs"}
    for verb, run_it in runs.items():
        parser = _command(actions, verb, do.prefix_acl if unsupported else run_it, kind,
                          helps[verb])
        parser.add_argument("--store", "-s", default="OZONE", choices=("OZONE", "S3"),
                            type=str.upper, help="the store type (OZONE; S3 is refused)")
        if verb == "getacl":   # picocli's negatable --json: --json[=true], --no-json, --json=false
            parser.add_argument("--json", action="store_true", default=True,
                                help="print JSON (the default)")
            parser.add_argument("--no-json", "--json=false", dest="json", action="store_false",
                                help="print type:name:rights,... instead")
            parser.add_argument("--json=true", dest="json", action="store_true",
                                help=argparse.SUPPRESS)
        else:
            parser.add_argument("--acls", "--acl", "-a", "-al", dest="acl_lists",
                                type=_acl_list, action="append", required=True,
                                metavar="ACLS", help="comma-separated type:name:rights[SCOPE], "
                                "e.g. user:bob:rw,group:dev:a[DEFAULT]; rights r w c l d a n, "
                                "x = READ_ACL, y = WRITE_ACL")


def _prefix_commands(parser: argparse.ArgumentParser) -> None:
    """Ozone's ``prefix`` ACL commands, parsed as Ozone parses them, then refused."""
    _acl_commands(_actions(parser), "key", unsupported=True)


def _unsupported_key_commands(actions: Any) -> None:
    """Ozone's data commands: parsed as Ozone parses them, then refused."""
    get = _command(actions, "get", do.needs_data("key get"), "key", "not supported")
    get.add_argument("file")
    get.add_argument("--force", "-f", action="store_true")
    _command(actions, "cat", do.needs_data("key cat"), "key", "not supported")
    copy = _command(actions, "cp", do.needs_data("key cp"), "bucket", "not supported")
    copy.add_argument("source")
    copy.add_argument("target")
    _replication_options(copy)
    checksum = _command(actions, "checksum", do.needs_data("key checksum"), "key",
                        "not supported")
    checksum.add_argument("--combine-mode", "-c")
    _replication_options(_command(actions, "rewrite", do.needs_data("key rewrite"), "key",
                                  "not supported"))


def run(args: argparse.Namespace) -> int:
    """Runs one shell command; returns the exit status (0, 2 usage, 255 failed)."""
    try:
        _run(args)
    except (UsageError, ConfigError) as error:
        print(f"om sh: {error}", file=sys.stderr)
        return EXIT_USAGE
    except ShellError as error:
        print(error, file=sys.stderr)
        return EXIT_FAILED
    except OMStatusError as error:
        print(f"{error.status_name} {error.message}".rstrip(), file=sys.stderr)
        return EXIT_FAILED
    except OMConnectionError as error:
        print(f"om sh: {error}", file=sys.stderr)
        return EXIT_FAILED
    return 0


def _run(args: argparse.Namespace) -> None:
    if getattr(args, "offline", None) is not None:   # token print: reads a file only
        args.offline(args)
        return
    if hasattr(args, "acl_lists"):
        args.acls = _flatten(args.acl_lists)
    kind = args.kind(args) if callable(args.kind) else args.kind
    at = parse_address(args.uri).require(kind)
    addresses = [at.om_address] if at.om_address else target_addresses(
        args, split_addresses(os.environ.get("OM_ADDRESS", DEFAULT_ADDRESS)))
    policy = RetryPolicy(deadline_s=args.timeout)
    tls, token = client_credentials(args, addresses)
    if tls is None and args.object == "token" and args.verb in ("renew", "cancel"):
        # no certificate found: act with the token itself, as Ozone's TokenHandler does
        tls, token = token_credentials(args, addresses, sh_token.read_token(args.token_path))
    with OMClient(addresses, user=args.user, policy=policy, read_mode=args.read_mode,
                  tls=tls, token=token) as client:
        args.command(client, args, at)
