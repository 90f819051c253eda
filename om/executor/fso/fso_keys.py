"""The key requests on FILE_SYSTEM_OPTIMIZED buckets, and the file-system requests.

As Ozone's ``BucketLayoutAwareOMKeyRequestFactory`` picks the ``...WithFSO`` request
for such a bucket, the key handlers hand over to these after loading the bucket:

* CreateKey: CreateFile with ``recursive`` and ``overwrite`` (the missing parents
  are created, in the same request).
* CommitKey: the open file becomes the file of its name in its directory; a file it
  replaces goes to deletedTable.
* LookupKey / LookupFile: a file (NOT_A_FILE for a directory).
* ListKeys: every file and directory below the bucket in tree order (a directory
  lists as ``path/``), filtered by prefix, paged by the last path returned.
* DeleteKey: a file; an empty directory; with ``recursive`` a directory and its
  subtree (one tombstone in deletedDirectoryTable: the subtree is unreachable at
  once, and purged in the background); DIRECTORY_NOT_EMPTY without it.
* RenameKey: a file or a whole directory, by moving one row (O(1) whatever the
  subtree); never into itself (a cycle).

Every one resolves its paths against applied state; the lock plan
(``om.gatekeeper.fs_locks``) made sure nothing in flight can change what they found.
"""

from __future__ import annotations

from dataclasses import dataclass

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.errors import OMError
from om.executor.fso.fs import (
    Entry,
    Ids,
    Resolved,
    children,
    components,
    file_not_a_directory,
    ids_of,
    join,
    resolve,
    walk,
)
from om.executor.fso.fso_rows import (
    charge_namespace,
    encode_entry,
    make_directories,
    open_file,
    replication,
    require_fso,
    status,
    with_path,
)
from om.executor.keys.retired_keys import retire
from om.executor.listing import page_size
from om.executor.quota import check_bucket_quota, replicated_size
from om.executor.rows import encode, read_bucket, read_volume
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView


@dataclass(frozen=True)
class Target:
    """A request's bucket and its path resolved in it."""

    bucket: om_pb2.BucketInfo
    resolved: Resolved


def target(view: ReadView, volume: str, bucket: str, path: str, ctx: ExecContext,
           what: str) -> Target:
    """Loads an FSO bucket (NOT_SUPPORTED_OPERATION for another layout) and resolves
    ``path`` in it (INVALID_KEY_NAME for a bad path)."""
    planned = ctx.planned.get((volume, bucket, path))
    if planned is not None:   # resolved by the lock plan on this very state
        return Target(*planned)
    found = read_bucket(view, volume, bucket)
    require_fso(found, what)
    parts = components(path, ctx.limits.key_name_max_bytes)
    ids = ids_of(read_volume(view, volume), found)
    return Target(found, resolve(view, ids, parts))


def _require_file(resolved: Resolved, missing: om_pb2.Status.ValueType) -> om_pb2.KeyInfo:
    if resolved.complete and resolved.leaf_dir is not None:
        raise OMError(om_pb2.NOT_A_FILE, f"'{resolved.path}' is a directory, not a file")
    if not resolved.complete or resolved.leaf_file is None:
        raise OMError(missing, f"File '{resolved.path}' not found")
    return resolved.leaf_file


# ----------------------------------------------------------------- writes ---

def create_directory(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
                     ctx: ExecContext) -> om_pb2.OMResponse:
    """CreateDirectory: the directory and every missing parent (``mkdir -p``)."""
    body = request.create_directory
    found = target(view, body.volume, body.bucket, body.key, ctx, "CreateDirectory")
    resolved = found.resolved
    if resolved.blocked:
        raise file_not_a_directory(resolved)
    if resolved.complete and resolved.leaf_file is not None:
        raise OMError(om_pb2.FILE_ALREADY_EXISTS, f"'{resolved.path}' is a file")
    if resolved.complete and resolved.leaf_dir is not None:
        raise OMError(om_pb2.DIRECTORY_ALREADY_EXISTS,
                      f"Directory '{resolved.path}' already exists")
    missing = resolved.parts[len(resolved.parents):]
    check_bucket_quota(found.bucket, ctx, 0, len(missing))
    make_directories(recorder, resolved.ids, resolved.parent_id, missing, request.user,
                     found.bucket, ctx)
    charge_namespace(recorder, found.bucket, 0, len(missing))
    return om_pb2.OMResponse(create_directory=om_pb2.CreateDirectoryResponse())


def create_file(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
                ctx: ExecContext) -> om_pb2.OMResponse:
    """CreateFile: an open file, with Ozone's recursive and overwrite flags."""
    body = request.create_file
    found = target(view, body.volume, body.bucket, body.key, ctx, "CreateFile")
    info, session = open_file(recorder, found.resolved, found.bucket, request.user,
                              body.data_size, replication(body.replication_factor),
                              body.recursive, body.overwrite, ctx)
    return om_pb2.OMResponse(create_file=om_pb2.CreateFileResponse(
        key_info=info, client_session_id=session))


def create_key(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
               ctx: ExecContext) -> om_pb2.OMResponse:
    """CreateKey on an FSO bucket: CreateFile, recursive and overwriting."""
    body = request.create_key
    found = target(view, body.volume, body.bucket, body.key, ctx, "CreateKey")
    info, session = open_file(recorder, found.resolved, found.bucket, request.user,
                              body.data_size, replication(body.replication_factor),
                              recursive=True, overwrite=True, ctx=ctx)
    return om_pb2.OMResponse(create_key=om_pb2.CreateKeyResponse(
        key_info=info, client_session_id=session))


def commit_key(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
               ctx: ExecContext) -> om_pb2.OMResponse:
    """CommitKey on an FSO bucket: the open file becomes the file of its name."""
    body = request.commit_key
    found = target(view, body.volume, body.bucket, body.key, ctx, "CommitKey")
    resolved, bucket = found.resolved, found.bucket
    if not resolved.complete:
        raise OMError(om_pb2.DIRECTORY_NOT_FOUND,
                      f"A directory of '{resolved.path}' is gone: the open file cannot commit")
    ids = resolved.ids
    open_key = tables.open_file_key(ids.volume_id, ids.bucket_id, resolved.parent_id,
                                    resolved.name, body.client_session_id)
    raw = view.get(om_pb2.OPEN_FILE, open_key)
    if raw is None:
        raise OMError(om_pb2.KEY_NOT_FOUND, f"Open file '{resolved.path}' of session "
                      f"{body.client_session_id} not found")
    if resolved.leaf_dir is not None:
        raise OMError(om_pb2.NOT_A_FILE, f"'{resolved.path}' is a directory, not a file")
    info = om_pb2.KeyInfo.FromString(raw)
    old = resolved.leaf_file
    new_bytes = replicated_size(body.data_size, info.replication_factor)
    old_bytes = 0 if old is None else replicated_size(old.data_size, old.replication_factor)
    namespace = 1 if old is None else 0
    check_bucket_quota(bucket, ctx, new_bytes - old_bytes, namespace)
    info.data_size = body.data_size
    info.modification_time = ctx.now_ms
    info.update_id = ctx.managed_index
    info.open_client_id = 0
    recorder.delete(om_pb2.OPEN_FILE, open_key)
    if old is not None:
        retire(recorder, with_path(old, resolved.path), ctx)
    recorder.put(om_pb2.FILE, ids.key(resolved.parent_id, resolved.name), encode(info))
    charge_namespace(recorder, bucket, new_bytes - old_bytes, namespace)
    return om_pb2.OMResponse(commit_key=om_pb2.CommitKeyResponse(
        key_info=with_path(info, resolved.path)))


def delete_key(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
               ctx: ExecContext) -> om_pb2.OMResponse:
    """DeleteKey on an FSO bucket: a file, an empty directory, or a subtree."""
    body = request.delete_key
    found = target(view, body.volume, body.bucket, body.key, ctx, "DeleteKey")
    resolved, bucket = found.resolved, found.bucket
    ids = resolved.ids
    if resolved.complete and resolved.leaf_file is not None:
        info = resolved.leaf_file
        recorder.delete(om_pb2.FILE, ids.key(resolved.parent_id, resolved.name))
        retire(recorder, with_path(info, resolved.path), ctx)
        charge_namespace(recorder, bucket,
                         -replicated_size(info.data_size, info.replication_factor), -1)
        return om_pb2.OMResponse(delete_key=om_pb2.DeleteKeyResponse(
            key_info=with_path(info, resolved.path)))
    if not resolved.complete or resolved.leaf_dir is None:
        raise OMError(om_pb2.KEY_NOT_FOUND,
                      f"Key '/{body.volume}/{body.bucket}/{resolved.path}' not found")
    gone = resolved.leaf_dir
    if next(children(view, ids, gone.object_id), None) is not None:
        if not body.recursive:
            raise OMError(om_pb2.DIRECTORY_NOT_EMPTY,
                          f"Directory '{resolved.path}' is not empty (delete it recursively)")
        recorder.put(om_pb2.DELETED_DIRECTORY, tables.deleted_directory_key(
            ids.volume_id, ids.bucket_id, resolved.parent_id, resolved.name, gone.object_id),
            encode_entry(gone))
    recorder.delete(om_pb2.DIRECTORY, ids.key(resolved.parent_id, resolved.name))
    charge_namespace(recorder, bucket, 0, -1)
    return om_pb2.OMResponse(delete_key=om_pb2.DeleteKeyResponse(
        key_info=om_pb2.KeyInfo(volume_name=body.volume, bucket_name=body.bucket,
                                key_name=resolved.path + "/", object_id=gone.object_id,
                                parent_object_id=gone.parent_object_id)))


def rename_key(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
               ctx: ExecContext) -> om_pb2.OMResponse:
    """RenameKey on an FSO bucket: one row moves, a file's or a whole directory's."""
    body = request.rename_key
    source = target(view, body.volume, body.bucket, body.key, ctx, "RenameKey").resolved
    planned = ctx.planned.get((body.volume, body.bucket, body.to_key))
    dest = planned[1] if planned is not None else resolve(
        view, source.ids, components(body.to_key, ctx.limits.key_name_max_bytes))
    moving: Entry
    if source.complete and source.leaf_file is not None:
        moving = source.leaf_file
    elif source.complete and source.leaf_dir is not None:
        moving = source.leaf_dir
    else:
        raise OMError(om_pb2.KEY_NOT_FOUND,
                      f"Key '/{body.volume}/{body.bucket}/{source.path}' not found")
    if dest.blocked:
        raise file_not_a_directory(dest)
    if not dest.complete:
        raise OMError(om_pb2.DIRECTORY_NOT_FOUND,
                      f"The parent of '{dest.path}' does not exist")
    if dest.leaf_dir is not None or dest.leaf_file is not None:
        raise OMError(om_pb2.FILE_ALREADY_EXISTS, f"'{dest.path}' already exists")
    if moving.object_id in {d.object_id for d in dest.parents}:
        raise OMError(om_pb2.INVALID_REQUEST,
                      f"Cannot rename '{source.path}' into itself ('{dest.path}')")
    ids = source.ids
    recorder.delete(om_pb2.DIRECTORY if isinstance(moving, om_pb2.DirectoryInfo)
                    else om_pb2.FILE, ids.key(source.parent_id, source.name))
    moved = _renamed(moving, dest.name, dest.parent_id, ctx)
    table = om_pb2.DIRECTORY if isinstance(moved, om_pb2.DirectoryInfo) else om_pb2.FILE
    recorder.put(table, ids.key(dest.parent_id, dest.name), encode_entry(moved))
    info = moved if isinstance(moved, om_pb2.KeyInfo) else om_pb2.KeyInfo(
        volume_name=body.volume, bucket_name=body.bucket, object_id=moved.object_id,
        parent_object_id=moved.parent_object_id)
    return om_pb2.OMResponse(rename_key=om_pb2.RenameKeyResponse(
        key_info=with_path(info, dest.path)))


def _renamed(entry: Entry, name: str, parent_id: int, ctx: ExecContext) -> Entry:
    """A copy of the moving row under its new name and parent."""
    if isinstance(entry, om_pb2.DirectoryInfo):
        directory = om_pb2.DirectoryInfo()
        directory.CopyFrom(entry)
        directory.name = name
        directory.parent_object_id = parent_id
        directory.modification_time = ctx.now_ms
        directory.update_id = ctx.managed_index
        return directory
    moved = om_pb2.KeyInfo()
    moved.CopyFrom(entry)
    moved.key_name = name
    moved.parent_object_id = parent_id
    moved.modification_time = ctx.now_ms
    moved.update_id = ctx.managed_index
    return moved


# ------------------------------------------------------------------ reads ---

def lookup_key(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
               ctx: ExecContext) -> om_pb2.OMResponse:
    """LookupKey on an FSO bucket: the file's row, named by its path."""
    body = request.lookup_key
    return om_pb2.OMResponse(lookup_key=om_pb2.LookupKeyResponse(key_info=_file_info(
        view, body, ctx, "LookupKey", om_pb2.KEY_NOT_FOUND)))


def lookup_file(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
                ctx: ExecContext) -> om_pb2.OMResponse:
    """LookupFile: FILE_NOT_FOUND, or NOT_A_FILE for a directory."""
    body = request.lookup_file
    return om_pb2.OMResponse(lookup_file=om_pb2.LookupFileResponse(key_info=_file_info(
        view, body, ctx, "LookupFile", om_pb2.FILE_NOT_FOUND)))


def _file_info(view: ReadView, body: om_pb2.LookupKeyRequest | om_pb2.LookupFileRequest,
               ctx: ExecContext, what: str, missing: om_pb2.Status.ValueType
               ) -> om_pb2.KeyInfo:
    """The file a lookup names, with its path; ``missing`` when there is none."""
    resolved = target(view, body.volume, body.bucket, body.key, ctx, what).resolved
    return with_path(_require_file(resolved, missing), resolved.path)


def get_file_status(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
                    ctx: ExecContext) -> om_pb2.OMResponse:
    """GetFileStatus: a file's or a directory's status; FILE_NOT_FOUND."""
    body = request.get_file_status
    resolved = target(view, body.volume, body.bucket, body.key, ctx,
                      "GetFileStatus").resolved
    entry: Entry | None = None
    if resolved.complete:
        entry = resolved.leaf_dir if resolved.leaf_dir is not None else resolved.leaf_file
    if entry is None:
        raise OMError(om_pb2.FILE_NOT_FOUND, f"'{resolved.path}' not found")
    return om_pb2.OMResponse(get_file_status=om_pb2.GetFileStatusResponse(
        status=status(resolved.path, entry)))


def list_status(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
                ctx: ExecContext) -> om_pb2.OMResponse:
    """ListStatus: a directory's entries (``recursive``: its whole subtree, in tree
    order), paged: ``start_key`` is the last path of the page before."""
    body = request.list_status
    bucket = read_bucket(view, body.volume, body.bucket)
    require_fso(bucket, "ListStatus")
    ids = ids_of(read_volume(view, body.volume), bucket)
    limit = page_size(body.num_entries, ctx.limits)
    base: tuple[str, ...] = ()
    parent_id = ids.bucket_id
    if body.key.strip("/"):
        resolved = resolve(view, ids, components(body.key, ctx.limits.key_name_max_bytes))
        if not resolved.complete or (resolved.leaf_dir is None and resolved.leaf_file is None):
            raise OMError(om_pb2.FILE_NOT_FOUND, f"'{resolved.path}' not found")
        if resolved.leaf_file is not None:   # a file lists as itself
            return om_pb2.OMResponse(list_status=om_pb2.ListStatusResponse(
                statuses=[status(resolved.path, resolved.leaf_file)]))
        assert resolved.leaf_dir is not None
        base, parent_id = resolved.parts, resolved.leaf_dir.object_id
    start = _relative_start(body.start_key, base, ctx)
    statuses: list[om_pb2.FileStatus] = []
    truncated = False
    for parts, entry in walk(view, ids, parent_id, base, start, body.recursive):
        if len(statuses) == limit:
            truncated = True
            break
        statuses.append(status(join(parts), entry))
    return om_pb2.OMResponse(list_status=om_pb2.ListStatusResponse(statuses=statuses,
                                                                   truncated=truncated))


def _relative_start(start_key: str, base: tuple[str, ...], ctx: ExecContext) -> tuple[str, ...]:
    """The page's resume point below ``base``; INVALID_REQUEST when it is elsewhere."""
    if not start_key.strip("/"):
        return ()
    start = components(start_key, ctx.limits.key_name_max_bytes)
    if start[:len(base)] != base or len(start) == len(base):
        raise OMError(om_pb2.INVALID_REQUEST,
                      f"start key '{start_key}' is not below '{join(base)}'")
    return start[len(base):]


def list_keys(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
              ctx: ExecContext) -> om_pb2.OMResponse:
    """ListKeys on an FSO bucket: files and directories (``path/``) in tree order, from
    the directory the prefix names (a prefix's paths lie in its subtree)."""
    body = request.list_keys
    bucket = read_bucket(view, body.volume, body.bucket)
    ids = ids_of(read_volume(view, body.volume), bucket)
    limit = page_size(body.max_keys, ctx.limits)
    base: tuple[str, ...] = ()
    parent_id = ids.bucket_id
    if "/" in body.prefix.strip("/"):
        inside = resolve(view, ids, components(body.prefix.rsplit("/", 1)[0],
                                               ctx.limits.key_name_max_bytes))
        if not inside.complete or inside.leaf_dir is None:
            return om_pb2.OMResponse(list_keys=om_pb2.ListKeysResponse())
        base, parent_id = inside.parts, inside.leaf_dir.object_id
    start: tuple[str, ...] = ()
    if body.start_key.strip("/"):
        start = components(body.start_key, ctx.limits.key_name_max_bytes)
        start = start[len(base):] if start[:len(base)] == base else ()
    infos: list[om_pb2.KeyInfo] = []
    truncated = False
    for parts, entry in walk(view, ids, parent_id, base, start, recursive=True):
        name = join(parts) + ("/" if isinstance(entry, om_pb2.DirectoryInfo) else "")
        if not name.startswith(body.prefix):
            continue
        if len(infos) == limit:
            truncated = True
            break
        infos.append(_listed(body, name, entry))
    return om_pb2.OMResponse(list_keys=om_pb2.ListKeysResponse(key_info=infos,
                                                               truncated=truncated))


def _listed(body: om_pb2.ListKeysRequest, name: str, entry: Entry) -> om_pb2.KeyInfo:
    if isinstance(entry, om_pb2.KeyInfo):
        return with_path(entry, name)
    return om_pb2.KeyInfo(volume_name=body.volume, bucket_name=body.bucket, key_name=name,
                          creation_time=entry.creation_time,
                          modification_time=entry.modification_time,
                          object_id=entry.object_id, update_id=entry.update_id,
                          acls=entry.acls, parent_object_id=entry.parent_object_id)


# ------------------------------------------------------------------ purge ---

def purge_directories(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
                      ctx: ExecContext) -> om_pb2.OMResponse:
    """PurgeDirectories (the leader's own request, Ozone's type 95): one bounded step of
    purging the bucket's deleted subtrees, as Ozone's DirectoryDeletingService takes
    many deleted directories a run. Tombstones are taken in key order (at most
    ``rows_max`` of them), and their direct entries go, at most ``rows_max`` in all:
    files to deletedTable with their bytes and namespace released, directories to
    deletedDirectoryTable (their own subtrees are purged in later steps); a
    tombstone with nothing left goes too, and the step stops at the first one it
    could not empty. Unreachable rows only: no client request can lock or see them,
    and a step is computed from applied state, so a step lost with a leadership
    change is simply computed again."""
    body = request.purge_directories
    bucket = read_bucket(view, body.volume, body.bucket)
    require_fso(bucket, "PurgeDirectories")
    assert body.rows_max > 0, "the gate bounds a purge step"
    ids = ids_of(read_volume(view, body.volume), bucket)
    scope = f"/{ids.volume_id}/{ids.bucket_id}/".encode()
    found = view.scan(om_pb2.DELETED_DIRECTORY, scope, None, body.rows_max)
    if not found:
        raise OMError(om_pb2.DIRECTORY_NOT_FOUND, "no deleted directory waits for its purge")
    purged = released_bytes = removed = 0
    for tombstone_key, raw in found:
        gone = om_pb2.DirectoryInfo.FromString(raw)
        emptied, count, released = _purge_children(view, recorder, ids, gone,
                                                   body.rows_max - purged, ctx)
        purged += count
        released_bytes += released
        if not emptied:
            break
        recorder.delete(om_pb2.DELETED_DIRECTORY, tombstone_key)
        removed += 1
    assert purged <= body.rows_max
    if purged:
        charge_namespace(recorder, bucket, -released_bytes, -purged)
    return om_pb2.OMResponse(purge_directories=om_pb2.PurgeDirectoriesResponse(
        purged=purged, tombstone_removed=removed == len(found), tombstones_removed=removed))


def _purge_children(view: ReadView, recorder: ChangeRecorder, ids: Ids,
                    gone: om_pb2.DirectoryInfo, budget: int, ctx: ExecContext
                    ) -> tuple[bool, int, int]:
    """Removes at most ``budget`` direct entries of the deleted directory ``gone``:
    (whether none is left, how many went, the replicated bytes they released)."""
    purged = released_bytes = 0
    for name, entry in children(view, ids, gone.object_id):
        if purged == budget:
            return False, purged, released_bytes
        purged += 1
        if isinstance(entry, om_pb2.DirectoryInfo):
            recorder.delete(om_pb2.DIRECTORY, ids.key(gone.object_id, name))
            recorder.put(om_pb2.DELETED_DIRECTORY, tables.deleted_directory_key(
                ids.volume_id, ids.bucket_id, gone.object_id, name, entry.object_id),
                encode_entry(entry))
        else:
            recorder.delete(om_pb2.FILE, ids.key(gone.object_id, name))
            retire(recorder, entry, ctx)
            released_bytes += replicated_size(entry.data_size, entry.replication_factor)
    return True, purged, released_bytes
