"""The rows file-system requests write: directories, open files, answers with paths.

Shared by CreateDirectory, CreateFile and the key requests on FILE_SYSTEM_OPTIMIZED
buckets (``om/executor/fso/fso_keys.py``). Rules:

* missing parents are created in the same request, top down, with the object ids
  ``ctx.object_id(0..n-1)`` of the request's window, so two requests never mint the
  same id and a replay mints the same ones;
* every directory and every committed file counts one in the bucket's namespace
  (a quota delta, so concurrent requests under the bucket read lock add up);
* rows hold an entry's own name; answers carry its whole path in the bucket.
"""

from __future__ import annotations

from om.executor.acl_rows import child_acls
from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.errors import OMError
from om.executor.fso.fs import Entry, Ids, Resolved, file_not_a_directory, is_fso
from om.executor.quota import check_bucket_quota, replicated_size
from om.executor.rows import encode
from om.protocol import om_pb2
from om.schema import tables

DEFAULT_REPLICATION = 3


def require_fso(bucket: om_pb2.BucketInfo, what: str) -> None:
    """NOT_SUPPORTED_OPERATION unless the bucket keeps directories (FSO)."""
    if not is_fso(bucket):
        raise OMError(om_pb2.NOT_SUPPORTED_OPERATION,
                      f"{what} needs a FILE_SYSTEM_OPTIMIZED bucket; "
                      f"'/{bucket.volume_name}/{bucket.bucket_name}' is {bucket.layout}")


def replication(requested: int) -> int:
    """The replication factor to record: 0 means 3; 1 and 3 are served."""
    if requested == 0:
        return DEFAULT_REPLICATION
    if requested not in (1, DEFAULT_REPLICATION):
        raise OMError(om_pb2.INVALID_REQUEST, f"replication factor {requested} is not 1 or 3")
    return requested


def make_directories(recorder: ChangeRecorder, ids: Ids, parent_id: int,
                     names: tuple[str, ...], user: str, bucket: om_pb2.BucketInfo,
                     ctx: ExecContext) -> int:
    """Records directories ``names`` one inside the next below ``parent_id``, with the
    request's first object ids; returns the innermost one's id (``parent_id`` when
    there are none). The caller charges their namespace."""
    acls = child_acls(user, bucket, ctx) if names else []
    for n, name in enumerate(names):
        row = om_pb2.DirectoryInfo(name=name, object_id=ctx.object_id(n),
                                   parent_object_id=parent_id, creation_time=ctx.now_ms,
                                   modification_time=ctx.now_ms, update_id=ctx.managed_index,
                                   acls=acls)
        recorder.put(om_pb2.DIRECTORY, ids.key(parent_id, name), encode_entry(row))
        parent_id = row.object_id
    return parent_id


def encode_entry(row: Entry) -> bytes:
    """A directoryTable or fileTable row's bytes (deterministic, as every row)."""
    return row.SerializeToString(deterministic=True)


def charge_namespace(recorder: ChangeRecorder, bucket: om_pb2.BucketInfo, bytes_delta: int,
                     namespace_delta: int) -> None:
    """Records a change of the bucket's used bytes and namespace."""
    recorder.quota_delta(om_pb2.BUCKET, tables.bucket_key(bucket.volume_name,
                                                          bucket.bucket_name),
                         bucket.object_id, bytes_delta, namespace_delta)


def with_path(info: om_pb2.KeyInfo, path: str) -> om_pb2.KeyInfo:
    """A copy of a file row that names the file by its whole path (for answers)."""
    answer = om_pb2.KeyInfo()
    answer.CopyFrom(info)
    answer.key_name = path
    return answer


def status(path: str, entry: Entry) -> om_pb2.FileStatus:
    """GetFileStatus's and ListStatus's view of an entry."""
    if isinstance(entry, om_pb2.DirectoryInfo):
        return om_pb2.FileStatus(path=path, is_directory=True, directory=entry)
    return om_pb2.FileStatus(path=path, key_info=with_path(entry, path))


def open_file(recorder: ChangeRecorder, resolved: Resolved, bucket: om_pb2.BucketInfo,
              user: str, size: int, replication_factor: int, recursive: bool,
              overwrite: bool, ctx: ExecContext) -> tuple[om_pb2.KeyInfo, int]:
    """CreateFile's rules (and CreateKey's, recursive and overwriting): the file row in
    openFileTable under a new session, missing parents created when ``recursive``.
    Returns the answer's key info (whole path) and the session id."""
    if resolved.blocked:
        raise file_not_a_directory(resolved)
    if resolved.complete and resolved.leaf_dir is not None:
        raise OMError(om_pb2.NOT_A_FILE, f"'{resolved.path}' is a directory, not a file")
    if resolved.complete and resolved.leaf_file is not None and not overwrite:
        raise OMError(om_pb2.FILE_ALREADY_EXISTS, f"File '{resolved.path}' already exists")
    missing = resolved.parts[len(resolved.parents):-1]
    if missing and not recursive:
        raise OMError(om_pb2.DIRECTORY_NOT_FOUND,
                      f"Directory '{'/'.join(resolved.parts[:len(resolved.parents) + 1])}' "
                      f"not found: cannot create '{resolved.path}' (not recursive)")
    check_bucket_quota(bucket, ctx, replicated_size(size, replication_factor), 1 + len(missing))
    parent_id = make_directories(recorder, resolved.ids, resolved.parent_id, missing, user,
                                 bucket, ctx)
    session_id = ctx.object_id(len(missing))
    info = om_pb2.KeyInfo(
        volume_name=bucket.volume_name, bucket_name=bucket.bucket_name,
        key_name=resolved.name, data_size=size, replication_factor=replication_factor,
        creation_time=ctx.now_ms, modification_time=ctx.now_ms,
        object_id=ctx.object_id(len(missing) + 1), update_id=ctx.managed_index,
        open_client_id=session_id, acls=child_acls(user, bucket, ctx),
        parent_object_id=parent_id)
    ids = resolved.ids
    recorder.put(om_pb2.OPEN_FILE, tables.open_file_key(ids.volume_id, ids.bucket_id, parent_id,
                                                        resolved.name, session_id),
                 encode(info))
    if missing:
        charge_namespace(recorder, bucket, 0, len(missing))
    return with_path(info, resolved.path), session_id
