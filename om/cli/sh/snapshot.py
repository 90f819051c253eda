"""``om sh snapshot create|list|ls|info|delete|diff``: OM snapshots, as Ozone's shell has them.

    om sh snapshot create /vol/bucket [NAME]          # no NAME: s<yyyyMMdd-HHmmss.SSS>
    om sh snapshot list /vol/bucket [-p PREFIX] [-s START] [-l N | -a]
    om sh snapshot info /vol/bucket NAME
    om sh snapshot delete /vol/bucket NAME
    om sh snapshot diff /vol/bucket FROM [TO] [-p PAGE] [-t TOKEN] [--json]
                                                      # no TO: against the live bucket

Read a snapshot's keys with ``om sh key info /vol/bucket/.snapshot/NAME/key`` and
``om sh key list /vol/bucket --prefix .snapshot/NAME/``. The diff prints Ozone's
report: ``+`` created, ``-`` deleted, ``M`` modified, ``R`` renamed (``a -> b``), each
entry's path as ``./key``; every page unless ``--page-size`` or ``--token`` asks for one
page (the next page's token is printed then). docs/operations/om-snapshots.md says what a
snapshot guarantees.
"""

from __future__ import annotations

import argparse
from typing import Any

from om.cli.sh.address import Address
from om.cli.sh.options import list_limit
from om.cli.sh.ozone_json import iso_instant, pretty
from om.client import OMClient
from om.client import requests as build
from om.protocol import om_pb2

_SIGNS = {om_pb2.DiffEntry.CREATE: "+", om_pb2.DiffEntry.DELETE: "-",
          om_pb2.DiffEntry.MODIFY: "M", om_pb2.DiffEntry.RENAME: "R"}
PAGES_MAX = 100_000


def register(objects: Any, command: Any) -> None:
    """Adds ``snapshot`` and its actions (``command`` makes an action parser)."""
    parser = objects.add_parser("snapshot", aliases=["snap"], help="OM snapshots of a bucket")
    actions = parser.add_subparsers(dest="verb", required=True, metavar="ACTION")
    create = command(actions, "create", snapshot_create, "bucket", "create a snapshot")
    create.add_argument("name", nargs="?", default="", help="its name (default: generated)")
    listing = command(actions, "list", snapshot_list, "bucket", "list snapshots", ("ls",))
    listing.add_argument("--prefix", "-p", default="", help="only names with this prefix")
    listing.add_argument("--start", "-s", default="", help="list after this name (excluded)")
    limit = listing.add_mutually_exclusive_group()
    limit.add_argument("--length", "-l", type=int, default=100,
                       help="most entries to list (default 100)")
    limit.add_argument("--all", "-a", action="store_true", help="list everything")
    info = command(actions, "info", snapshot_info, "bucket", "print a snapshot")
    info.add_argument("name", help="the snapshot's name")
    delete = command(actions, "delete", snapshot_delete, "bucket", "delete a snapshot")
    delete.add_argument("name", help="the snapshot's name")
    diff = command(actions, "diff", snapshot_diff, "bucket",
                   "keys that differ between two snapshots, or a snapshot and the bucket")
    diff.add_argument("from_snapshot", help="the older snapshot")
    diff.add_argument("to_snapshot", nargs="?", default="",
                      help="the newer snapshot (default: the live bucket)")
    diff.add_argument("--page-size", "-p", type=int, default=0,
                      help="entries in one page (at most 1000); prints that page only")
    diff.add_argument("--token", "-t", default="", help="the page after this token only")
    diff.add_argument("--json", action="store_true", help="print the entries as JSON")


def snapshot_json(info: om_pb2.SnapshotInfo) -> dict[str, Any]:
    """A snapshot as Ozone's shell prints one (OzoneSnapshot's fields), with this node's
    checkpoint position."""
    return {
        "volumeName": info.volume,
        "bucketName": info.bucket,
        "name": info.name,
        "creationTime": iso_instant(info.creation_time),
        "snapshotStatus": om_pb2.SnapshotStatus.Name(info.status),
        "snapshotId": str(info.snapshot_id),
        "logPosition": info.log_position,
        "checkpointOnThisOm": info.checkpoint_here,
    }


def snapshot_create(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    created = client.create_snapshot(at.volume, at.bucket, args.name)
    print(f"Snapshot {created.name} created for /{at.volume}/{at.bucket}.")


def snapshot_list(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    limit = list_limit(args.length, args.all)
    found: list[om_pb2.SnapshotInfo] = []
    start = args.start
    for _ in range(PAGES_MAX):
        wanted = 1000 if limit is None else min(1000, limit - len(found))
        page = client.list_snapshots(at.volume, at.bucket, args.prefix, start, wanted)
        found.extend(page.snapshot_info)
        if not page.truncated or not page.snapshot_info or (
                limit is not None and len(found) >= limit):
            break
        start = page.snapshot_info[-1].name
    print(pretty([snapshot_json(s) for s in found]))


def snapshot_info(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    print(pretty(snapshot_json(client.snapshot_info(at.volume, at.bucket, args.name))))


def snapshot_delete(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    client.delete_snapshot(at.volume, at.bucket, args.name)
    print(f"Snapshot {args.name} deleted from /{at.volume}/{at.bucket}.")


def diff_line(entry: om_pb2.DiffEntry) -> str:
    """One entry as Ozone's SnapshotDiffReport prints it."""
    line = f"{_SIGNS[entry.type]}\t./{entry.key}"
    return f"{line} -> ./{entry.to_key}" if entry.type == om_pb2.DiffEntry.RENAME else line


def snapshot_diff(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    one_page = bool(args.page_size or args.token)
    if one_page:
        page = client.call(build.snapshot_diff(at.volume, at.bucket, args.from_snapshot,
                                               args.to_snapshot, args.token,
                                               args.page_size)).snapshot_diff
        entries, next_token = list(page.entries), page.next_token
    else:
        entries = client.snapshot_diff(at.volume, at.bucket, args.from_snapshot,
                                       args.to_snapshot, pages_max=PAGES_MAX)
        next_token = ""
    if args.json:
        print(pretty({"entries": [{"type": om_pb2.DiffEntry.DiffType.Name(e.type),
                                   "key": e.key, **({"toKey": e.to_key} if e.to_key else {})}
                                  for e in entries], "nextToken": next_token}))
        return
    to = f"snapshot: {args.to_snapshot}" if args.to_snapshot else "the live bucket"
    print(f"Difference between snapshot: {args.from_snapshot} and {to}")
    for entry in entries:
        print(diff_line(entry))
    if next_token:
        print(f"Next page token: {next_token}")
