"""The auditor's file-system invariants: the shape of each FSO bucket's tree.

Per FILE_SYSTEM_OPTIMIZED bucket, from its directoryTable, fileTable and
deletedDirectoryTable rows (``om/executor/fso/fs.py`` has the layout):

* every row sits under the key its own fields name (parent id, name);
* every directory's and file's parent is the bucket, a directory of the bucket, or
  a directory deleted with its subtree (a tombstone: the subtree waits for its
  purge) -- no orphan;
* following parents from any directory reaches the bucket or a tombstone -- no
  cycle (a crossing pair of directory renames would make one);
* no name is both a directory and a file in one parent;
* object ids are unique among the bucket's directories and files;
* the bucket's ``used_namespace`` is its directories plus its files, and its
  ``used_bytes`` its files' replicated sizes (a deleted subtree still counts until
  its purge releases it) plus the committed parts of its multipart uploads.

Pure over a ``ReadView``; it holds one bucket's entries at a time (ids, parents and
names: a few tens of bytes an entry).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from google.protobuf.message import DecodeError

from om.executor.fso.fs import is_fso
from om.executor.quota import replicated_size
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView

FS_ORPHAN = "fs_orphan"
FS_CYCLE = "fs_cycle"
FS_DUPLICATE_NAME = "fs_duplicate_name"
FS_DUPLICATE_ID = "fs_duplicate_id"
FS_USAGE = "fs_usage"
FS_ROW_MALFORMED = "fs_row_malformed"
FS_CATEGORIES = (FS_ORPHAN, FS_CYCLE, FS_DUPLICATE_NAME, FS_DUPLICATE_ID, FS_USAGE,
                 FS_ROW_MALFORMED)
PAGE_ROWS = 1000
_Row = TypeVar("_Row", om_pb2.DirectoryInfo, om_pb2.KeyInfo, om_pb2.MultipartKeyInfo)


@dataclass
class _Tree:
    """One bucket's entries: directory id -> (parent id, name); files' (parent, name)."""

    bucket_id: int
    directories: dict[int, tuple[int, str]] = field(default_factory=dict)
    files: list[tuple[int, str, int]] = field(default_factory=list)   # parent, name, object id
    tombstones: set[int] = field(default_factory=set)
    used_bytes: int = 0
    problems: list[tuple[str, str]] = field(default_factory=list)


def fs_problems(view: ReadView) -> list[tuple[str, str, str]]:
    """(category, subject, detail) of every broken invariant of every FSO bucket."""
    found: list[tuple[str, str, str]] = []
    for _, raw in _rows(view, om_pb2.BUCKET, b""):
        bucket = om_pb2.BucketInfo.FromString(raw)
        if not is_fso(bucket):
            continue
        volume_raw = view.get(om_pb2.VOLUME, tables.volume_key(bucket.volume_name))
        if volume_raw is None:
            continue   # the store checks report a bucket without its volume
        volume_id = om_pb2.VolumeInfo.FromString(volume_raw).object_id
        subject = f"bucket /{bucket.volume_name}/{bucket.bucket_name}"
        found += [(category, subject, detail)
                  for category, detail in _bucket_problems(view, volume_id, bucket)]
    return found


def _bucket_problems(view: ReadView, volume_id: int,
                     bucket: om_pb2.BucketInfo) -> list[tuple[str, str]]:
    tree = _Tree(bucket.object_id)
    scope = f"/{volume_id}/{bucket.object_id}/".encode()
    _load(view, scope, tree)
    tree.used_bytes += _upload_bytes(view, bucket)
    _check_parents(tree)
    _check_names_and_ids(tree)
    entries = len(tree.directories) + len(tree.files)
    if (bucket.used_namespace, bucket.used_bytes) != (entries, tree.used_bytes):
        tree.problems.append((FS_USAGE, (
            f"used_namespace {bucket.used_namespace}, used_bytes {bucket.used_bytes}, but "
            f"the tree holds {len(tree.directories)} directories and {len(tree.files)} files "
            f"of {tree.used_bytes} replicated bytes")))
    return tree.problems


def _upload_bytes(view: ReadView, bucket: om_pb2.BucketInfo) -> int:
    """The replicated bytes of the committed parts of the bucket's uploads in progress
    (keyed by path in both layouts: ``om.executor.multipart.uploads``)."""
    total = 0
    prefix = tables.key_prefix(bucket.volume_name, bucket.bucket_name)
    for _, raw in _rows(view, om_pb2.MULTIPART_INFO, prefix):
        upload = _parse(om_pb2.MultipartKeyInfo, raw)
        if upload is not None:   # else: the store checks report it malformed
            total += sum(replicated_size(p.part_key_info.data_size,
                                         max(1, p.part_key_info.replication_factor))
                         for p in upload.part_key_info_list)
    return total


def _load(view: ReadView, scope: bytes, tree: _Tree) -> None:
    for key, raw in _rows(view, om_pb2.DIRECTORY, scope):
        row = _parse(om_pb2.DirectoryInfo, raw)
        if row is None or key != scope + f"{row.parent_object_id}/{row.name}".encode():
            tree.problems.append((FS_ROW_MALFORMED, f"directoryTable {key!r}"))
            continue
        if row.object_id in tree.directories:
            tree.problems.append((FS_DUPLICATE_ID, f"directory id {row.object_id} twice"))
        tree.directories[row.object_id] = (row.parent_object_id, row.name)
    for key, raw in _rows(view, om_pb2.FILE, scope):
        info = _parse(om_pb2.KeyInfo, raw)
        if info is None or key != scope + f"{info.parent_object_id}/{info.key_name}".encode():
            tree.problems.append((FS_ROW_MALFORMED, f"fileTable {key!r}"))
            continue
        tree.files.append((info.parent_object_id, info.key_name, info.object_id))
        if info.replication_factor >= 1:
            tree.used_bytes += replicated_size(info.data_size, info.replication_factor)
    for _, raw in _rows(view, om_pb2.DELETED_DIRECTORY, scope):
        row = _parse(om_pb2.DirectoryInfo, raw)
        if row is not None:
            tree.tombstones.add(row.object_id)


def _check_parents(tree: _Tree) -> None:
    """Orphans (a parent that is nothing) and cycles (a chain that never ends)."""
    ends = {tree.bucket_id, *tree.tombstones}
    for parent, name, object_id in tree.files:
        if parent not in ends and parent not in tree.directories:
            tree.problems.append((FS_ORPHAN, f"file {name} ({object_id}): parent {parent} "
                                             "is no directory of the bucket"))
    for object_id, (parent, name) in tree.directories.items():
        seen = {object_id}
        while parent not in ends:
            if parent not in tree.directories:
                tree.problems.append((FS_ORPHAN, f"directory {name} ({object_id}): ancestor "
                                                 f"{parent} is no directory of the bucket"))
                break
            if parent in seen:
                tree.problems.append((FS_CYCLE, f"directory {name} ({object_id}): its "
                                                f"ancestors loop through {parent}"))
                break
            seen.add(parent)
            parent = tree.directories[parent][0]


def _check_names_and_ids(tree: _Tree) -> None:
    names = {(parent, name) for parent, name in tree.directories.values()}
    ids = set(tree.directories)
    for parent, name, object_id in tree.files:
        if (parent, name) in names:
            tree.problems.append((FS_DUPLICATE_NAME, f"{name} in {parent} is a directory "
                                                     "and a file"))
        if object_id in ids:
            tree.problems.append((FS_DUPLICATE_ID, f"id {object_id} twice"))
        ids.add(object_id)


def _parse(kind: type[_Row], raw: bytes) -> _Row | None:
    try:
        return kind.FromString(raw)
    except DecodeError:
        return None


def _rows(view: ReadView, table: tables.TableId, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    after: bytes | None = None
    while True:
        page = view.scan(table, prefix, after, PAGE_ROWS)
        yield from page
        if len(page) < PAGE_ROWS:
            return
        after = page[-1][0]
