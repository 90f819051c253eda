"""``om sh``: the namespace shell, mirroring ``ozone sh``.

    om sh volume create|info|list|delete|setquota /vol
    om sh bucket create|info|list|delete|setquota /vol/bucket [--quota 10GB] [--namespace-quota N]
    om sh key put|info|list|delete|rename /vol/bucket/key [FILE] [--size N]

Output is JSON, as ``ozone sh`` prints it. Errors print the status name and a
message to stderr and exit 1 (2 when no OM could be reached).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from om.client import OMClient, OMConnectionError, OMStatusError
from om.client.identity import DEFAULT_ADDRESS, split_addresses
from om.client.retry_policy import RetryPolicy

_UNITS = {"": 1, "B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40,
          "PB": 1 << 50}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGTP]?B?)\s*$", re.IGNORECASE)


class UsageError(Exception):
    """The command line names something malformed."""


def parse_size(text: str) -> int:
    """Bytes from "1024", "10GB", "5 MB" (binary units, as Ozone reads them)."""
    match = _SIZE.match(text)
    if match is None:
        raise UsageError(f"invalid size '{text}': use a number with an optional unit B/KB/MB/GB/TB")
    unit = match.group(2).upper()
    if unit and not unit.endswith("B"):
        unit += "B"
    return int(match.group(1)) * _UNITS[unit]


def split_path(path: str, parts: int) -> list[str]:
    """["vol", "bucket", "key"] from "/vol/bucket/key", checking how many parts."""
    if not path.startswith("/"):
        raise UsageError(f"'{path}' must start with '/'")
    pieces = path[1:].split("/", parts - 1)
    if len(pieces) != parts or not all(pieces):
        shape = ["/vol", "/vol/bucket", "/vol/bucket/key"][parts - 1]
        raise UsageError(f"'{path}' must look like {shape}")
    return pieces


def _show(message: Message | list[Message]) -> None:
    if isinstance(message, list):
        print(json.dumps([MessageToDict(m) for m in message], indent=2))
    else:
        print(json.dumps(MessageToDict(message), indent=2))


def _list_all(fetch: Callable[[str], tuple[list[Message], bool]], limit: int) -> list[Message]:
    items: list[Message] = []
    start = ""
    while True:
        page, truncated = fetch(start)
        items.extend(page)
        if not truncated or not page or (limit and len(items) >= limit):
            return items[:limit] if limit else items
        start = _name_of(page[-1])


def _name_of(message: Message) -> str:
    for field in ("key_name", "bucket_name", "volume"):
        if hasattr(message, field):
            value: str = getattr(message, field)
            return value
    raise AssertionError(f"no name field on {type(message).__name__}")


def volume(client: OMClient, args: argparse.Namespace) -> None:
    """Runs ``om sh volume ACTION /vol``."""
    if args.action == "list":
        _show(_list_all(lambda start: _page(client.list_volumes(args.prefix, start),
                                            "volume_info"), args.length))
        return
    (name,) = split_path(args.path, 1)
    quota, namespace = _quotas(args)
    if args.action == "create":
        _show(client.create_volume(name, quota, namespace))
    elif args.action == "info":
        _show(client.info_volume(name))
    elif args.action == "delete":
        client.delete_volume(name)
        print(f"Volume {name} is deleted")
    elif args.action == "setquota":
        _require_quota(quota, namespace)
        _show(client.set_volume_quota(name, quota, namespace))


def bucket(client: OMClient, args: argparse.Namespace) -> None:
    """Runs ``om sh bucket ACTION /vol/bucket``."""
    if args.action == "list":
        (vol,) = split_path(args.path, 1)
        _show(_list_all(lambda start: _page(client.list_buckets(vol, args.prefix, start),
                                            "bucket_info"), args.length))
        return
    vol, name = split_path(args.path, 2)
    quota, namespace = _quotas(args)
    if args.action == "create":
        _show(client.create_bucket(vol, name, quota, namespace))
    elif args.action == "info":
        _show(client.info_bucket(vol, name))
    elif args.action == "delete":
        client.delete_bucket(vol, name)
        print(f"Bucket {name} is deleted")
    elif args.action == "setquota":
        _require_quota(quota, namespace)
        _show(client.set_bucket_quota(vol, name, quota, namespace))


def key(client: OMClient, args: argparse.Namespace) -> None:
    """Runs ``om sh key ACTION /vol/bucket/key``."""
    if args.action == "list":
        vol, name = split_path(args.path, 2)
        _show(_list_all(lambda start: _page(client.list_keys(vol, name, args.prefix, start),
                                            "key_info"), args.length))
        return
    vol, bkt, name = split_path(args.path, 3)
    if args.action == "put":
        _show(client.put_key(vol, bkt, name, _put_size(args)))
    elif args.action == "info":
        _show(client.lookup_key(vol, bkt, name))
    elif args.action == "delete":
        client.delete_key(vol, bkt, name)
        print(f"Key {name} is deleted")
    elif args.action == "rename":
        if not args.target:
            raise UsageError("rename needs the new key name: om sh key rename /v/b/key NEWKEY")
        _show(client.rename_key(vol, bkt, name, args.target))


def _page(response: Any, field: str) -> tuple[list[Message], bool]:
    return list(getattr(response, field)), bool(response.truncated)


def _quotas(args: argparse.Namespace) -> tuple[int, int]:
    quota = parse_size(args.quota) if getattr(args, "quota", None) else 0
    namespace = getattr(args, "namespace_quota", None) or 0
    if namespace < 0:
        raise UsageError("--namespace-quota must be positive")
    return quota, namespace


def _require_quota(quota: int, namespace: int) -> None:
    if not quota and not namespace:
        raise UsageError("setquota needs --quota and/or --namespace-quota")


def _put_size(args: argparse.Namespace) -> int:
    if args.size is not None:
        return parse_size(args.size)
    if not args.target:
        raise UsageError("put needs a local FILE (its size is recorded) or --size")
    try:
        return os.path.getsize(args.target)
    except OSError as error:
        raise UsageError(f"cannot read '{args.target}': {error.strerror}") from None


_RUNNERS = {"volume": volume, "bucket": bucket, "key": key}
_ACTIONS = {
    "volume": ["create", "info", "list", "delete", "setquota"],
    "bucket": ["create", "info", "list", "delete", "setquota"],
    "key": ["put", "info", "list", "delete", "rename"],
}


def register(commands: Any) -> None:
    """Adds the ``sh`` subcommand."""
    p = commands.add_parser("sh", help="volume, bucket and key commands (like `ozone sh`)")
    p.add_argument("--om", default=os.environ.get("OM_ADDRESS", DEFAULT_ADDRESS),
                   help="comma-separated OM addresses (default 127.0.0.1:9862 or $OM_ADDRESS)")
    p.add_argument("--user", help="the user to act as (default: the login name)")
    p.add_argument("--timeout", type=float, default=30.0, help="overall deadline in seconds")
    p.add_argument("--read-mode", choices=("linearizable", "local"), default="linearizable",
                   help="local: any node answers reads from its own state, maybe stale "
                        "(default: linearizable, confirmed by the leader)")
    objects = p.add_subparsers(dest="object", required=True)
    for name, actions in _ACTIONS.items():
        sub = objects.add_parser(name)
        sub.add_argument("action", choices=actions)
        sub.add_argument("path", nargs="?" if name == "volume" else None, default="/")
        if name == "key":
            sub.add_argument("target", nargs="?", help="put: local FILE; rename: NEWKEY")
            sub.add_argument("--size", help="put: the size to record instead of a file's")
        else:
            sub.add_argument("--quota", help="space quota, e.g. 10GB")
            sub.add_argument("--namespace-quota", type=int, help="most buckets / keys")
        sub.add_argument("--prefix", default="", help="list: only names with this prefix")
        sub.add_argument("--length", "-l", type=int, default=100,
                         help="list: most entries to print (0: all)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Runs one shell command; returns the exit status."""
    addresses = split_addresses(args.om)
    policy = RetryPolicy(deadline_s=args.timeout)
    try:
        with OMClient(addresses, user=args.user, policy=policy,
                      read_mode=args.read_mode) as client:
            _RUNNERS[args.object](client, args)
    except UsageError as error:
        print(f"om sh: {error}", file=sys.stderr)
        return 2
    except OMStatusError as error:
        print(f"{error.status_name}: {error.message}", file=sys.stderr)
        return 1
    except OMConnectionError as error:
        print(f"om sh: {error}", file=sys.stderr)
        return 2
    return 0
