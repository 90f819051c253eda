"""OM snapshots (Ozone's ``ozone sh snapshot``): create, delete, info, list, diff, and
reads addressed into a snapshot.

A snapshot is a snapshotInfoTable row (``SnapshotInfo``, keyed
``/<volume>/<bucket>/<name>``) the leader writes like any row, and a RocksDB
checkpoint of the whole store that every node takes right after it applies the
batch holding that row (``om.statemachine.om_snapshot_checkpoints``): a barrier in
the replicated stream, at one log position on every node. The create holds the
bucket's write lock from execution until its batch applies, so no write of that
bucket shares its batch: the checkpoint holds every write of the bucket ordered
before the create and none after.

Reads name a snapshot as Ozone does, by a key name that starts with
``.snapshot/<name>/`` (LookupKey, ListKeys; LookupFile, GetFileStatus, ListStatus
in a file-system bucket); they run the ordinary handler against the checkpoint
and answer key names and paths with the prefix put back. Writes of
keys under ``.snapshot/`` are refused at the gate (INVALID_KEY_NAME).

Statuses, Ozone's: an unknown snapshot is FILE_NOT_FOUND, a duplicate name
FILE_ALREADY_EXISTS, a bucket at ``Limits.snapshots_per_bucket_max`` or a node
short of disk QUOTA_EXCEEDED, a snapshot whose checkpoint this node lacks
INVALID_SNAPSHOT_ERROR.

Everything here is pure: the checkpoints are reached through the context's
``SnapshotViews`` port.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.errors import OMError
from om.executor.fso.fs import ids_of, is_fso, join, walk
from om.executor.listing import list_page, page_size
from om.executor.rows import load_bucket, load_volume
from om.protocol import om_pb2
from om.schema import tables
from om.schema.ids import object_id_for
from om.schema.read_view import ReadView

SNAPSHOT_DIR = ".snapshot"
SNAPSHOT_PREFIX = SNAPSHOT_DIR + "/"
DIFF_PAGE_MAX = 1000          # Ozone's ozone.om.snapshot.diff.max.page.size
DIFF_PAGE_DEFAULT = 1000
DIFF_KEYS_MAX = 200_000       # keys per side a diff compares (it holds both in memory)
TOKEN_MAX_CHARS = 64
_SCAN_PAGE = 10_000

Handler = Callable[[om_pb2.OMRequest, ReadView, ChangeRecorder, ExecContext], om_pb2.OMResponse]


def reserved(key: str) -> bool:
    """Whether a key name (or a file-system path, which may start with '/') lies under
    the path reserved for snapshots."""
    path = key.lstrip("/")
    return path == SNAPSHOT_DIR or path.startswith(SNAPSHOT_PREFIX)


def address(key: str) -> tuple[str, str] | None:
    """(snapshot name, key in it) of a key name under ``.snapshot/``, else None."""
    if not key.startswith(SNAPSHOT_PREFIX):
        return None
    name, _, rest = key[len(SNAPSHOT_PREFIX):].partition("/")
    return name, rest


def default_name(now_ms: int) -> str:
    """Ozone's generated name: ``s`` and the UTC time, ``s20231025-123456.789``."""
    seconds, ms = divmod(now_ms, 1000)
    return "s" + time.strftime("%Y%m%d-%H%M%S", time.gmtime(seconds)) + f".{ms:03d}"


def load_snapshot(view: ReadView, volume: str, bucket: str, name: str) -> om_pb2.SnapshotInfo:
    """The snapshot's row; FILE_NOT_FOUND (Ozone's) when the bucket has none by that name."""
    raw = view.get(om_pb2.SNAPSHOT_INFO, tables.snapshot_key(volume, bucket, name)) \
        if name else None
    if raw is None:
        raise OMError(om_pb2.FILE_NOT_FOUND,
                      f"Snapshot '/{volume}/{bucket}/{name}' does not exist")
    return om_pb2.SnapshotInfo.FromString(raw)


def _with_position(info: om_pb2.SnapshotInfo, ctx: ExecContext) -> om_pb2.SnapshotInfo:
    if ctx.snapshots is not None:
        info.log_position = ctx.snapshots.position(info.snapshot_id)
        info.checkpoint_here = info.log_position > 0
    return info


def snapshot_view(view: ReadView, ctx: ExecContext, volume: str, bucket: str,
                  name: str) -> ReadView:
    """The state the named snapshot holds, on this node."""
    load_bucket(view, volume, bucket)
    info = load_snapshot(view, volume, bucket, name)
    opened = None if ctx.snapshots is None else ctx.snapshots.open(info.snapshot_id)
    if opened is None:
        raise OMError(om_pb2.INVALID_SNAPSHOT_ERROR,
                      f"this OM holds no checkpoint of snapshot '/{volume}/{bucket}/{name}' "
                      "(its checkpoint failed here, or the Raft snapshot this OM caught up "
                      "from carried none); read it from another OM")
    return opened


# ------------------------------------------------------------------------ writes ---

def create(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
           ctx: ExecContext) -> om_pb2.OMResponse:
    """CreateSnapshot: the row; every node checkpoints where its batch applies."""
    body = request.create_snapshot
    bucket = load_bucket(view, body.volume, body.bucket)
    name = body.name or default_name(ctx.now_ms)
    key = tables.snapshot_key(body.volume, body.bucket, name)
    if view.get(om_pb2.SNAPSHOT_INFO, key) is not None:
        raise OMError(om_pb2.FILE_ALREADY_EXISTS,
                      f"Snapshot '/{body.volume}/{body.bucket}/{name}' already exists")
    most = ctx.limits.snapshots_per_bucket_max
    held = view.scan(om_pb2.SNAPSHOT_INFO, tables.snapshot_prefix(body.volume, body.bucket),
                     None, most)
    if len(held) >= most:
        raise OMError(om_pb2.QUOTA_EXCEEDED,
                      f"Bucket '/{body.volume}/{body.bucket}' holds {len(held)} snapshots, "
                      f"the limit ([snapshot] per_bucket_max); delete one first")
    if ctx.snapshots is not None:
        problem = ctx.snapshots.headroom_problem()
        if problem is not None:
            raise OMError(om_pb2.QUOTA_EXCEEDED, f"no snapshot now: {problem}")
    info = om_pb2.SnapshotInfo(snapshot_id=ctx.object_id(), name=name, volume=body.volume,
                               bucket=body.bucket, status=om_pb2.SNAPSHOT_ACTIVE,
                               creation_time=ctx.now_ms, bucket_object_id=bucket.object_id)
    recorder.put(om_pb2.SNAPSHOT_INFO, key, info.SerializeToString(deterministic=True))
    return om_pb2.OMResponse(create_snapshot=om_pb2.CreateSnapshotResponse(snapshot_info=info))


def delete(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
           ctx: ExecContext) -> om_pb2.OMResponse:
    """DeleteSnapshot: the row goes; every node frees the checkpoint where it applies."""
    body = request.delete_snapshot
    load_bucket(view, body.volume, body.bucket)
    info = load_snapshot(view, body.volume, body.bucket, body.name)
    recorder.delete(om_pb2.SNAPSHOT_INFO, tables.snapshot_key(body.volume, body.bucket, body.name))
    return om_pb2.OMResponse(delete_snapshot=om_pb2.DeleteSnapshotResponse(snapshot_info=info))


# ------------------------------------------------------------------------- reads ---

def info(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
         ctx: ExecContext) -> om_pb2.OMResponse:
    """GetSnapshotInfo: the row, with this node's checkpoint position."""
    body = request.get_snapshot_info
    load_bucket(view, body.volume, body.bucket)
    found = _with_position(load_snapshot(view, body.volume, body.bucket, body.name), ctx)
    return om_pb2.OMResponse(
        get_snapshot_info=om_pb2.GetSnapshotInfoResponse(snapshot_info=found))


def list_snapshots(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
                   ctx: ExecContext) -> om_pb2.OMResponse:
    """ListSnapshot: a bucket's snapshots by name, paged like ListKeys."""
    body = request.list_snapshot
    load_bucket(view, body.volume, body.bucket)
    values, truncated = list_page(view, om_pb2.SNAPSHOT_INFO,
                                  tables.snapshot_prefix(body.volume, body.bucket),
                                  body.prefix, body.start_after,
                                  page_size(body.max_results, ctx.limits))
    found = [_with_position(om_pb2.SnapshotInfo.FromString(v), ctx) for v in values]
    return om_pb2.OMResponse(list_snapshot=om_pb2.ListSnapshotResponse(
        snapshot_info=found, truncated=truncated))


def lookup_in_snapshot(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
                       ctx: ExecContext, handler: Handler) -> om_pb2.OMResponse:
    """A LookupKey of ``.snapshot/<name>/<key>``: ``handler`` against the checkpoint."""
    body = request.lookup_key
    found = address(body.key)
    assert found is not None
    name, key = found
    snapshot = snapshot_view(view, ctx, body.volume, body.bucket, name)
    if not key:
        raise OMError(om_pb2.KEY_NOT_FOUND, f"Key '/{body.volume}/{body.bucket}/{body.key}' "
                      "not found: name a key after the snapshot's name")
    inner = om_pb2.OMRequest()
    inner.CopyFrom(request)
    inner.lookup_key.key = key
    response = handler(inner, snapshot, recorder, dataclasses.replace(ctx, snapshots=None))
    response.lookup_key.key_info.key_name = f"{SNAPSHOT_PREFIX}{name}/{key}"
    return response


def list_in_snapshot(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
                     ctx: ExecContext, handler: Handler) -> om_pb2.OMResponse:
    """A ListKeys whose prefix is ``.snapshot/<name>/...``: ``handler`` against the
    checkpoint; the start key, if any, must lie in the same snapshot."""
    body = request.list_keys
    found = address(body.prefix)
    assert found is not None
    name, prefix = found
    scope = f"{SNAPSHOT_PREFIX}{name}/"
    if body.start_key and not body.start_key.startswith(scope):
        raise OMError(om_pb2.INVALID_REQUEST, f"start key {body.start_key[:80]!r} is not in "
                      f"the snapshot the prefix names ({scope})")
    snapshot = snapshot_view(view, ctx, body.volume, body.bucket, name)
    inner = om_pb2.OMRequest()
    inner.CopyFrom(request)
    inner.list_keys.prefix = prefix
    inner.list_keys.start_key = body.start_key[len(scope):]
    response = handler(inner, snapshot, recorder, dataclasses.replace(ctx, snapshots=None))
    for key_info in response.list_keys.key_info:
        key_info.key_name = scope + key_info.key_name
    return response


def _in_snapshot(path: str) -> tuple[str, str] | None:
    """(snapshot name, path in it) of a file-system path under ``.snapshot/`` (a leading
    '/' allowed, as file-system paths carry one), else None."""
    return address(path.lstrip("/"))


def file_system_read(handler: Handler) -> Handler:
    """LookupFile, GetFileStatus or ListStatus that also reads ``.snapshot/<name>/<path>``:
    ``handler`` against that snapshot's checkpoint, the answer's paths with the prefix."""
    def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
                ctx: ExecContext) -> om_pb2.OMResponse:
        field = request.WhichOneof("body")
        assert field in ("lookup_file", "get_file_status", "list_status")
        body = getattr(request, field)
        found = _in_snapshot(body.key)
        if found is None:
            return handler(request, view, recorder, ctx)
        name, path = found
        scope = f"{SNAPSHOT_PREFIX}{name}/"
        snapshot = snapshot_view(view, ctx, body.volume, body.bucket, name)
        inner = om_pb2.OMRequest()
        inner.CopyFrom(request)
        inner_body = getattr(inner, field)
        inner_body.key = path
        if field == "list_status" and body.start_key:
            start = body.start_key.lstrip("/")
            if not start.startswith(scope):
                raise OMError(om_pb2.INVALID_REQUEST, f"start key {body.start_key[:80]!r} is "
                              f"not in the snapshot the path names ({scope})")
            inner_body.start_key = start[len(scope):]
        response = handler(inner, snapshot, recorder, dataclasses.replace(ctx, snapshots=None))
        if field == "lookup_file":
            response.lookup_file.key_info.key_name = scope + response.lookup_file.key_info.key_name
        statuses = ([response.get_file_status.status] if field == "get_file_status"
                    else list(response.list_status.statuses) if field == "list_status" else [])
        for status in statuses:
            status.path = scope + status.path
            if status.HasField("key_info"):
                status.key_info.key_name = scope + status.key_info.key_name
        return response
    return execute


# -------------------------------------------------------------------------- diff ---

def _too_many(volume: str, bucket: str) -> OMError:
    return OMError(om_pb2.NOT_SUPPORTED_OPERATION, f"a diff compares at most {DIFF_KEYS_MAX} "
                   f"keys a side; '/{volume}/{bucket}' holds more")


def _fs_entries(view: ReadView, volume: str, bucket: str) -> dict[str, om_pb2.KeyInfo]:
    """Every file and directory (``path/``) of a file-system bucket in ``view``, by path
    (bounded); a directory as a KeyInfo of its object id and times."""
    ids = ids_of(load_volume(view, volume), load_bucket(view, volume, bucket))
    found: dict[str, om_pb2.KeyInfo] = {}
    for parts, entry in walk(view, ids, ids.bucket_id, (), (), recursive=True):
        if isinstance(entry, om_pb2.KeyInfo):
            found[join(parts)] = entry
        else:
            found[join(parts) + "/"] = om_pb2.KeyInfo(
                key_name=join(parts) + "/", object_id=entry.object_id,
                modification_time=entry.modification_time)
        if len(found) > DIFF_KEYS_MAX:
            raise _too_many(volume, bucket)
    return found


def _keys(view: ReadView, volume: str, bucket: str) -> dict[str, om_pb2.KeyInfo]:
    """Every committed key of a bucket in ``view``, by name (bounded)."""
    if is_fso(load_bucket(view, volume, bucket)):
        return _fs_entries(view, volume, bucket)
    prefix = tables.key_prefix(volume, bucket)
    found: dict[str, om_pb2.KeyInfo] = {}
    after: bytes | None = None
    for _ in range(DIFF_KEYS_MAX // _SCAN_PAGE + 1):   # one page past the limit at most
        rows = view.scan(om_pb2.KEY, prefix, after, _SCAN_PAGE)
        for _, raw in rows:
            info_ = om_pb2.KeyInfo.FromString(raw)
            found[info_.key_name] = info_
        if len(rows) < _SCAN_PAGE:
            return found
        after = rows[-1][0]
    raise _too_many(volume, bucket)


def _changed(a: om_pb2.KeyInfo, b: om_pb2.KeyInfo) -> bool:
    return (a.object_id != b.object_id or a.data_size != b.data_size
            or a.modification_time != b.modification_time)


def diff_entries(before: dict[str, om_pb2.KeyInfo],
                 after: dict[str, om_pb2.KeyInfo]) -> list[om_pb2.DiffEntry]:
    """Keys created, deleted, modified and renamed from ``before`` to ``after``.

    A key whose object id lives on under another name was renamed (and, were its
    size or time changed too, that name is also modified); a name on both sides
    otherwise is modified when its object id, size or modification time differ;
    the rest were created or deleted. Sorted by name, then type: deterministic.
    """
    entry = om_pb2.DiffEntry
    after_names = {k.object_id: name for name, k in after.items()}
    entries: list[om_pb2.DiffEntry] = []
    moved_from: set[str] = set()
    moved_to: set[str] = set()
    for name, key in before.items():
        new_name = after_names.get(key.object_id)
        if new_name is not None and new_name != name and new_name not in before:
            entries.append(entry(type=entry.RENAME, key=name, to_key=new_name))
            moved_from.add(name)
            moved_to.add(new_name)
            moved = after[new_name]
            if moved.data_size != key.data_size:
                entries.append(entry(type=entry.MODIFY, key=new_name))
    for name, key in before.items():
        if name in moved_from:
            continue
        if name in after and name not in moved_to:
            if _changed(key, after[name]):
                entries.append(entry(type=entry.MODIFY, key=name))
        else:
            entries.append(entry(type=entry.DELETE, key=name))
    for name in after:
        if name in moved_to or (name in before and name not in moved_from):
            continue
        entries.append(entry(type=entry.CREATE, key=name))
    entries.sort(key=lambda e: (e.key, e.type, e.to_key))
    return entries


def _token(from_id: int, to_id: int, offset: int) -> str:
    return f"{from_id}-{to_id}-{offset}"


def _offset(token: str, from_id: int, to_id: int) -> int:
    if not token:
        return 0
    parts = token.split("-")
    if len(parts) != 3 or not all(p.isdigit() for p in parts) \
            or (int(parts[0]), int(parts[1])) != (from_id, to_id):
        raise OMError(om_pb2.INVALID_REQUEST, f"token {token[:80]!r} is not one this diff's "
                      "pages answered")
    return int(parts[2])


def diff(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
         ctx: ExecContext) -> om_pb2.OMResponse:
    """SnapshotDiff: a page of the keys that differ between two snapshots of a bucket,
    or a snapshot and the live bucket (``to_snapshot`` empty). Each page computes the
    whole diff again: with the live bucket, pages may see it move in between. In a
    file-system bucket the entries are files and directories (``path/``) by path: a
    directory renamed is the rename of it and of every entry below it."""
    body = request.snapshot_diff
    load_bucket(view, body.volume, body.bucket)
    from_info = load_snapshot(view, body.volume, body.bucket, body.from_snapshot)
    before = _keys(snapshot_view(view, ctx, body.volume, body.bucket, body.from_snapshot),
                   body.volume, body.bucket)
    to_id = 0
    if body.to_snapshot:
        to_id = load_snapshot(view, body.volume, body.bucket, body.to_snapshot).snapshot_id
        after_view = snapshot_view(view, ctx, body.volume, body.bucket, body.to_snapshot)
    else:
        after_view = view
    after = _keys(after_view, body.volume, body.bucket)
    entries = diff_entries(before, after)
    offset = _offset(body.token, from_info.snapshot_id, to_id)
    size = body.page_size or DIFF_PAGE_DEFAULT
    assert size <= DIFF_PAGE_MAX, "the gate bounds the page"
    page = entries[offset:offset + size]
    end = offset + len(page)
    next_token = _token(from_info.snapshot_id, to_id, end) if end < len(entries) else ""
    return om_pb2.OMResponse(snapshot_diff=om_pb2.SnapshotDiffResponse(
        entries=page, next_token=next_token, total=len(entries)))


def held_by_snapshot(view: ReadView, volume: str, bucket: str,
                     versions: list[om_pb2.KeyInfo]) -> bool:
    """Whether a live snapshot of the bucket holds any of a deletedTable row's versions:
    one taken after the version was created (its object id) and before it was retired
    (the update id the retiring request gave it). Ids ascend with the managed index,
    so this needs no checkpoint."""
    rows = view.scan(om_pb2.SNAPSHOT_INFO, tables.snapshot_prefix(volume, bucket), None,
                     DIFF_KEYS_MAX)
    taken = [om_pb2.SnapshotInfo.FromString(raw).snapshot_id for _, raw in rows]
    return any(v.object_id < s and (v.update_id == 0 or s < object_id_for(v.update_id))
               for v in versions for s in taken)
