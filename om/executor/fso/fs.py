"""File-system buckets (FILE_SYSTEM_OPTIMIZED): paths, their resolution, tree walks.

Sans-IO over a ``ReadView`` of applied state, like every handler. In such a bucket
a key name is a *path*: components separated by '/', each a directory except the
last, which names a file or a directory. Directories are rows of directoryTable,
files rows of fileTable, both keyed by ``/<volume id>/<bucket id>/<parent id>/<name>``
(``om.schema.tables.fs_key``): an entry is found from its parent's object id, so a
directory rename rewrites one row whatever lies below it.

Path rules (Ozone's ``OmUtils.isValidKeyPath`` for FSO keys): at most one leading and
one trailing '/' are ignored; no component is empty, '.' or '..'; no control
characters; at most ``PATH_DEPTH_MAX`` components, since a request creates its
missing directories with object ids from its own window of ``IDS_PER_INDEX``
(``om.schema.ids.object_id_for``), the file and its session taking two more.

Invariants the handlers keep (and the auditor checks): a name is a directory or a
file in its parent, never both; every row's parent chain reaches the bucket; ids are
never reused, so a resolution that found the same ids twice found the same entries.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from om.executor.errors import OMError
from om.protocol import om_pb2
from om.schema import tables
from om.schema.ids import IDS_PER_INDEX
from om.schema.read_view import ReadView

FSO = "FILE_SYSTEM_OPTIMIZED"
OBS = "OBJECT_STORE"
LAYOUTS = {"": OBS, OBS: OBS, FSO: FSO}
PATH_DEPTH_MAX = IDS_PER_INDEX - 6   # the directories one request may create, and then some
PAGE_ROWS = 1000                     # rows a tree walk reads from a table at a time
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

Entry = om_pb2.DirectoryInfo | om_pb2.KeyInfo


def is_fso(bucket: om_pb2.BucketInfo) -> bool:
    """Whether the bucket keeps directories as rows."""
    return bucket.layout == FSO


def components(path: str, max_bytes: int) -> tuple[str, ...]:
    """The components of a path; INVALID_KEY_NAME naming what is wrong with it."""
    assert max_bytes > 0
    if len(path.encode()) > max_bytes:
        raise OMError(om_pb2.INVALID_KEY_NAME, f"Invalid path: longer than {max_bytes} bytes")
    if _CONTROL.search(path):
        raise OMError(om_pb2.INVALID_KEY_NAME, "Invalid path: control characters")
    trimmed = path[1:] if path.startswith("/") else path
    trimmed = trimmed[:-1] if trimmed.endswith("/") else trimmed
    if not trimmed:
        raise OMError(om_pb2.INVALID_KEY_NAME, "Invalid path: it names the bucket itself")
    parts = tuple(trimmed.split("/"))
    for part in parts:
        if part in ("", ".", ".."):
            raise OMError(om_pb2.INVALID_KEY_NAME,
                          f"Invalid path '{path}': a component may not be empty, '.' or '..'")
    if len(parts) > PATH_DEPTH_MAX:
        raise OMError(om_pb2.INVALID_KEY_NAME,
                      f"Invalid path: {len(parts)} levels, at most {PATH_DEPTH_MAX}")
    return parts


def join(parts: tuple[str, ...]) -> str:
    """A path from its components."""
    return "/".join(parts)


@dataclass(frozen=True)
class Ids:
    """The object ids a bucket's fs rows are keyed under."""

    volume_id: int
    bucket_id: int

    def key(self, parent_id: int, name: str) -> bytes:
        return tables.fs_key(self.volume_id, self.bucket_id, parent_id, name)

    def prefix(self, parent_id: int) -> bytes:
        return tables.fs_prefix(self.volume_id, self.bucket_id, parent_id)


def ids_of(volume: om_pb2.VolumeInfo, bucket: om_pb2.BucketInfo) -> Ids:
    """The ids of a bucket's rows."""
    assert is_fso(bucket)
    return Ids(volume.object_id, bucket.object_id)


def directory(view: ReadView, ids: Ids, parent_id: int, name: str) -> om_pb2.DirectoryInfo | None:
    """The directory ``name`` of a parent, or None."""
    raw = view.get(om_pb2.DIRECTORY, ids.key(parent_id, name))
    if raw is None:
        return None
    found = om_pb2.DirectoryInfo.FromString(raw)
    assert (found.name, found.parent_object_id) == (name, parent_id)
    return found


def file(view: ReadView, ids: Ids, parent_id: int, name: str) -> om_pb2.KeyInfo | None:
    """The committed file ``name`` of a parent, or None."""
    raw = view.get(om_pb2.FILE, ids.key(parent_id, name))
    if raw is None:
        return None
    found = om_pb2.KeyInfo.FromString(raw)
    assert (found.key_name, found.parent_object_id) == (name, parent_id)
    return found


@dataclass(frozen=True)
class Resolved:
    """A path resolved against applied state.

    ``parents`` are the existing directories from the top down, at most one fewer
    than the path's components; when they are all there (``complete``), ``leaf_dir``
    or ``leaf_file`` is what the last component names, if anything. ``blocked`` is the
    number of components of a path prefix that is a *file* where a directory is
    needed (0: none)."""

    ids: Ids
    parts: tuple[str, ...]
    parents: tuple[om_pb2.DirectoryInfo, ...]
    leaf_dir: om_pb2.DirectoryInfo | None = None
    leaf_file: om_pb2.KeyInfo | None = None
    blocked: int = 0

    @property
    def complete(self) -> bool:
        """Whether every ancestor directory exists."""
        return len(self.parents) == len(self.parts) - 1

    @property
    def parent_id(self) -> int:
        """The deepest existing ancestor's id (the bucket's at the top)."""
        return self.parents[-1].object_id if self.parents else self.ids.bucket_id

    @property
    def name(self) -> str:
        return self.parts[-1]

    @property
    def path(self) -> str:
        return join(self.parts)

    def ids_along(self) -> tuple[int, ...]:
        """The object ids this resolution found, top down (for re-validation)."""
        found = [d.object_id for d in self.parents]
        if self.leaf_dir is not None:
            found.append(self.leaf_dir.object_id)
        if self.leaf_file is not None:
            found.append(self.leaf_file.object_id)
        return tuple(found)


def resolve(view: ReadView, ids: Ids, parts: tuple[str, ...]) -> Resolved:
    """Walks the path from the bucket; stops at the first missing ancestor."""
    assert parts
    parent_id = ids.bucket_id
    parents: list[om_pb2.DirectoryInfo] = []
    for depth, name in enumerate(parts[:-1], 1):
        found = directory(view, ids, parent_id, name)
        if found is None:
            blocked = depth if file(view, ids, parent_id, name) is not None else 0
            return Resolved(ids, parts, tuple(parents), blocked=blocked)
        parents.append(found)
        parent_id = found.object_id
    return Resolved(ids, parts, tuple(parents), directory(view, ids, parent_id, parts[-1]),
                    file(view, ids, parent_id, parts[-1]))


def file_not_a_directory(resolved: Resolved) -> OMError:
    """The error for a path running through a file (``blocked``)."""
    assert resolved.blocked
    return OMError(om_pb2.FILE_ALREADY_EXISTS,
                   f"'{join(resolved.parts[:resolved.blocked])}' is a file, not a directory: "
                   f"'{resolved.path}' cannot be below it")


def children(view: ReadView, ids: Ids, parent_id: int,
             after: str = "") -> Iterator[tuple[str, Entry]]:
    """A directory's entries in name order (directories and files merged), after the
    name ``after``; reads ``PAGE_ROWS`` rows a table at a time."""
    prefix = ids.prefix(parent_id)
    directories = _rows(view, om_pb2.DIRECTORY, prefix, after)
    files = _rows(view, om_pb2.FILE, prefix, after)
    next_dir, next_file = next(directories, None), next(files, None)
    while next_dir is not None or next_file is not None:
        if next_file is None or (next_dir is not None and next_dir[0] < next_file[0]):
            assert next_dir is not None
            name, raw = next_dir
            yield name, om_pb2.DirectoryInfo.FromString(raw)
            next_dir = next(directories, None)
        else:
            name, raw = next_file
            assert next_dir is None or name != next_dir[0], "a name is a file or a directory"
            yield name, om_pb2.KeyInfo.FromString(raw)
            next_file = next(files, None)


def _rows(view: ReadView, table: tables.TableId, prefix: bytes,
          after: str) -> Iterator[tuple[str, bytes]]:
    start = prefix + after.encode() if after else None
    while True:
        page = view.scan(table, prefix, start, PAGE_ROWS)
        for key, raw in page:
            yield tables.fs_name(key, prefix), raw
        if len(page) < PAGE_ROWS:
            return
        start = page[-1][0]


def walk(view: ReadView, ids: Ids, parent_id: int, base: tuple[str, ...],
         start: tuple[str, ...], recursive: bool) -> Iterator[tuple[tuple[str, ...], Entry]]:
    """Entries below a directory in tree order (by name, a directory's contents right
    after it when ``recursive``), after the path ``start`` (relative, exclusive);
    yields each entry's path components and row."""
    after = ""
    if start:   # resume: what is left of start[0]'s subtree comes first (tree order)
        after = start[0]
        inner = directory(view, ids, parent_id, start[0]) if recursive else None
        if inner is not None:
            yield from walk(view, ids, inner.object_id, (*base, start[0]), start[1:], recursive)
    for name, entry in children(view, ids, parent_id, after):
        yield (*base, name), entry
        if recursive and isinstance(entry, om_pb2.DirectoryInfo):
            yield from walk(view, ids, entry.object_id, (*base, name), (), recursive)
