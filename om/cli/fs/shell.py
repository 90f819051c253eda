"""``om fs``: the file-system verbs people type (``ozone fs``, ``hdfs dfs``) on FSO buckets.

    om fs mkdir [-p] PATH...        directories (-p: with their parents; existing ones are fine)
    om fs ls [-R] PATH...           a directory's entries (-R: the whole subtree)
    om fs stat PATH...              a file's or directory's type, size, time and path
    om fs mv SRC DST                rename; into DST when DST is a directory (O(1) for a directory)
    om fs rm [-r] PATH...           a file, an empty directory, or (-r) a whole subtree
    om fs touch PATH...             an empty file where there is none
    om fs du [-s] PATH...           bytes (and replicated bytes) below a path

PATH is ``ofs://[host[:port]]/volume/bucket/path`` or ``/volume/bucket/path`` (Ozone's
ofs layout: volume and bucket are the first two components); the bucket must be
FILE_SYSTEM_OPTIMIZED (``om sh bucket create --layout fso``). The HDFS spelling with
a dash (``om fs -mkdir -p ...``) works too. Connection flags as ``om sh``; a failed
command prints the status and message and exits 255, a usage error exits 2.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from om.cli.common import (
    add_dir_flag,
    add_tls_flags,
    add_token_flag,
    client_credentials,
    target_addresses,
)
from om.client import OMClient, OMConnectionError, OMStatusError
from om.client.identity import DEFAULT_ADDRESS, split_addresses
from om.client.retry_policy import RetryPolicy
from om.config import ConfigError
from om.protocol import om_pb2

EXIT_USAGE = 2
EXIT_FAILED = 255
VERBS = ("mkdir", "ls", "stat", "mv", "rm", "touch", "du")
PAGE = 1000


class FsUsageError(Exception):
    """A path or argument the command cannot use."""


@dataclass(frozen=True)
class FsPath:
    """``/volume/bucket/path``: where a path lives and the path inside its bucket."""

    volume: str
    bucket: str
    path: str      # "" for the bucket's top

    def __str__(self) -> str:
        return "/" + "/".join(p for p in (self.volume, self.bucket, self.path) if p)

    def child(self, name: str) -> FsPath:
        return FsPath(self.volume, self.bucket, f"{self.path}/{name}" if self.path else name)


def parse_path(text: str) -> FsPath:
    """An ofs path: the scheme and authority are optional; volume and bucket required."""
    rest = text
    if rest.startswith("ofs://"):
        rest = rest[len("ofs://"):]
        rest = rest[rest.index("/"):] if "/" in rest else ""
    parts = [p for p in rest.split("/") if p]
    if len(parts) < 2:
        raise FsUsageError(f"'{text}': a path needs /volume/bucket")
    return FsPath(parts[0], parts[1], "/".join(parts[2:]))


def normalize(argv: Sequence[str]) -> list[str]:
    """``om fs -mkdir ...`` (HDFS's spelling) as ``om fs mkdir ...``."""
    args = list(argv)
    if not args or args[0] != "fs":
        return args
    for n, arg in enumerate(args[1:], 1):   # no option of om fs is spelled -<verb>
        if arg.startswith("-") and arg[1:] in VERBS:
            args[n] = arg[1:]
            break
    return args


def register(commands: Any) -> None:
    """Adds the ``fs`` subcommand."""
    p = commands.add_parser("fs", help="file-system verbs on FSO buckets (like `ozone fs`)",
                            description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--om", help="comma-separated OM addresses (default: the cluster of "
                   "--dir, else $OM_ADDRESS, else 127.0.0.1:9862)")
    add_dir_flag(p)
    p.add_argument("--user", help="the user to act as (default: the login name)")
    p.add_argument("--timeout", type=float, default=30.0, help="overall deadline in seconds")
    add_tls_flags(p)
    add_token_flag(p)
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    _verb(verbs, "mkdir", mkdir, "-p", "create missing parents; an existing directory is fine")
    _verb(verbs, "ls", ls, "-R", "the whole subtree")
    _verb(verbs, "stat", stat)
    mv_parser = verbs.add_parser("mv", help="rename (into DST when it is a directory)")
    mv_parser.add_argument("source")
    mv_parser.add_argument("destination")
    mv_parser.set_defaults(run=run, do=mv)
    _verb(verbs, "rm", rm, "-r", "a directory with everything below it")
    _verb(verbs, "touch", touch)
    _verb(verbs, "du", du, "-s", "one total per path")


def _verb(verbs: Any, name: str, do: Callable[[OMClient, argparse.Namespace], None],
          flag: str = "", flag_help: str = "") -> None:
    parser = verbs.add_parser(name, help=(do.__doc__ or "").split("\n")[0])
    if flag:
        parser.add_argument(flag, dest="flag", action="store_true", help=flag_help)
    else:
        parser.set_defaults(flag=False)
    parser.add_argument("paths", nargs="+", metavar="PATH")
    parser.set_defaults(run=run, do=do)


def run(args: argparse.Namespace) -> int:
    """Runs one verb; 0, 2 (usage) or 255 (failed), as ``om sh``."""
    try:
        addresses = target_addresses(args, split_addresses(
            os.environ.get("OM_ADDRESS", DEFAULT_ADDRESS)))
        tls, token = client_credentials(args, addresses)
        with OMClient(addresses, user=args.user, policy=RetryPolicy(deadline_s=args.timeout),
                      tls=tls, token=token) as client:
            args.do(client, args)
    except (FsUsageError, ConfigError) as error:
        print(f"om fs: {error}", file=sys.stderr)
        return EXIT_USAGE
    except OMStatusError as error:
        print(f"{error.status_name} {error.message}".rstrip(), file=sys.stderr)
        return EXIT_FAILED
    except OMConnectionError as error:
        print(f"om fs: {error}", file=sys.stderr)
        return EXIT_FAILED
    return 0


def _paths(args: argparse.Namespace) -> list[FsPath]:
    return [parse_path(text) for text in args.paths]


def _status(client: OMClient, at: FsPath) -> om_pb2.FileStatus | None:
    """The entry at ``at``, None when there is none (a bucket's top is a directory)."""
    if not at.path:
        return om_pb2.FileStatus(path="", is_directory=True)
    try:
        return client.get_file_status(at.volume, at.bucket, at.path)
    except OMStatusError as error:
        if error.status_name == "FILE_NOT_FOUND":
            return None
        raise


def mkdir(client: OMClient, args: argparse.Namespace) -> None:
    """Creates directories."""
    for at in _paths(args):
        if not at.path:
            raise FsUsageError(f"{at}: the bucket's top exists")
        parent = at.path.rsplit("/", 1)[0] if "/" in at.path else ""
        if not args.flag and parent:
            found = _status(client, FsPath(at.volume, at.bucket, parent))
            if found is None or not found.is_directory:
                raise FsUsageError(f"{at}: no such directory '{parent}' (use -p)")
        try:
            client.create_directory(at.volume, at.bucket, at.path)
        except OMStatusError as error:
            if not (args.flag and error.status_name == "DIRECTORY_ALREADY_EXISTS"):
                raise


def entries(client: OMClient, at: FsPath, recursive: bool) -> Iterator[om_pb2.FileStatus]:
    """A directory's entries, page after page."""
    start = ""
    while True:
        page = client.list_status(at.volume, at.bucket, at.path, recursive, start, PAGE)
        yield from page.statuses
        if not page.truncated or not page.statuses:
            return
        start = page.statuses[-1].path


def _line(volume: str, bucket: str, found: om_pb2.FileStatus) -> str:
    if found.is_directory:
        kind, size, owner, when = "d", 0, "-", found.directory.modification_time
    else:
        info = found.key_info
        kind, size, owner, when = "-", info.data_size, "-", info.modification_time
    stamp = datetime.datetime.fromtimestamp(when / 1000, datetime.UTC).strftime(
        "%Y-%m-%d %H:%M")
    replicas = "-" if found.is_directory else str(found.key_info.replication_factor)
    return (f"{kind}rwxrwxrwx {replicas:>3} {owner:<8} {size:>12} {stamp} "
            f"/{volume}/{bucket}/{found.path}")


def ls(client: OMClient, args: argparse.Namespace) -> None:
    """Lists directories (a file lists as itself)."""
    for at in _paths(args):
        found = _status(client, at)
        if found is None:
            raise OMStatusError(om_pb2.OMResponse(
                status=om_pb2.FILE_NOT_FOUND, message=f"'{at}': No such file or directory"))
        if not found.is_directory:
            print(_line(at.volume, at.bucket, found))
            continue
        listed = list(entries(client, at, args.flag))
        if not args.flag:
            print(f"Found {len(listed)} items")
        for entry in listed:
            print(_line(at.volume, at.bucket, entry))


def stat(client: OMClient, args: argparse.Namespace) -> None:
    """Prints an entry's type, size, modification time and path."""
    for at in _paths(args):
        found = _status(client, at)
        if found is None:
            raise OMStatusError(om_pb2.OMResponse(
                status=om_pb2.FILE_NOT_FOUND, message=f"'{at}': No such file or directory"))
        when = found.directory.modification_time if found.is_directory else \
            found.key_info.modification_time
        size = 0 if found.is_directory else found.key_info.data_size
        stamp = datetime.datetime.fromtimestamp(when / 1000, datetime.UTC).strftime(
            "%Y-%m-%d %H:%M:%S")
        print(f"{'directory' if found.is_directory else 'regular file'} {size} {stamp} {at}")


def mv(client: OMClient, args: argparse.Namespace) -> None:
    """Renames SRC to DST, or into DST when DST is a directory."""
    source, dest = parse_path(args.source), parse_path(args.destination)
    if (source.volume, source.bucket) != (dest.volume, dest.bucket):
        raise FsUsageError("mv renames within one bucket")
    if not source.path:
        raise FsUsageError(f"{source}: cannot move a bucket's top")
    found = _status(client, dest)
    if found is not None and found.is_directory:
        dest = dest.child(source.path.rsplit("/", 1)[-1])
    client.rename_key(source.volume, source.bucket, source.path, dest.path)


def rm(client: OMClient, args: argparse.Namespace) -> None:
    """Deletes files, empty directories, or (-r) subtrees."""
    for at in _paths(args):
        if not at.path:
            raise FsUsageError(f"{at}: delete the bucket with om sh bucket delete")
        client.delete_key(at.volume, at.bucket, at.path, recursive=args.flag)


def touch(client: OMClient, args: argparse.Namespace) -> None:
    """Creates empty files where there are none (an existing file is left as it is)."""
    for at in _paths(args):
        found = _status(client, at)
        if found is not None and not found.is_directory:
            continue
        opened = client.create_file(at.volume, at.bucket, at.path)
        client.commit_key(at.volume, at.bucket, at.path, opened.client_session_id, 0)


def du(client: OMClient, args: argparse.Namespace) -> None:
    """Bytes and replicated bytes below each path (-s: one line per path)."""
    for at in _paths(args):
        found = _status(client, at)
        if found is None:
            raise OMStatusError(om_pb2.OMResponse(
                status=om_pb2.FILE_NOT_FOUND, message=f"'{at}': No such file or directory"))
        listed = [found] if not found.is_directory else list(entries(client, at, True))
        files = [e.key_info for e in listed if not e.is_directory]
        size = sum(f.data_size for f in files)
        space = sum(f.data_size * f.replication_factor for f in files)
        if args.flag or not found.is_directory:
            print(f"{size}  {space}  {at}")
            continue
        for entry in entries(client, at, False):
            below = [entry] if not entry.is_directory else list(
                entries(client, at.child(entry.path.rsplit("/", 1)[-1]), True))
            sizes = [e.key_info for e in below if not e.is_directory]
            print(f"{sum(k.data_size for k in sizes)}  "
                  f"{sum(k.data_size * k.replication_factor for k in sizes)}  "
                  f"/{at.volume}/{at.bucket}/{entry.path}")
