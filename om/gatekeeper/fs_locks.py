"""Locks of file-system requests: keyed by object ids, planned against applied state.

A path in a FILE_SYSTEM_OPTIMIZED bucket resolves to object ids (``om.executor.fso.fs``);
the locks are keyed by what a request touches, never by the path's text, so an O(1)
directory rename, which re-parents a subtree without touching its rows, leaves every
other request's locks meaning what they meant:

* **slot** ``(bucket id, parent id, name)``: one name in one directory.
* A write takes the bucket's read lock (as every key write: bucket property changes
  and deletes wait), a **shared** slot lock on every existing ancestor of each path it
  touches, and an **exclusive** slot lock on each name it creates, removes, replaces
  or renames (for a create below missing directories: the first missing one, which
  every concurrent creator of that subtree needs too).
* A multipart complete takes a create's locks for the key's path, and the key's
  write lock that commit and abort of the upload's parts take (its rows are keyed by
  the path, ``om.executor.multipart.uploads``); a part's CreateKey is planned as in an
  object-store bucket (the bucket's read lock: its row has a fresh key).

Why this is enough:

* *No two writers of one name*: they both want its slot exclusively.
* *No create below a directory being removed or renamed*: the creator holds the
  directory's slot shared (an ancestor), the remover or renamer exclusively.
* *No cycle from crossing renames* (``mv /a /b/x`` with ``mv /b /a/y``): each rename
  holds its source slot exclusively and every ancestor of its destination shared; a
  cycle needs each destination inside the other's source, so each would hold shared
  the slot the other holds exclusively: they conflict and run one after the other,
  and the second sees the first applied and refuses to move a directory into itself.
* *No deadlock*: locks are taken in one total order (level, then name), as every plan.

**Plan, lock, re-validate.** The plan is computed without locks, from applied state,
and the locks taken in order. A write that got every lock at once executes at once:
nothing was applied in between. A write that waited re-plans once granted; if the
plan changed (a rename or delete applied meanwhile moved what the path names), it
releases everything and starts again (``REPLAN_MAX`` times, then TIMEOUT).

**The bucket plan** (``[fso] lock_plan = "bucket"``): every one of these writes takes
its bucket's exclusive lock and nothing else, as Ozone mainline locks FSO requests
(``RegularBucketLockStrategy``); writes in one bucket then run one at a time, each
holding the lock until it is applied. Kept as the baseline ``om bench --profile fso``
measures the object-id plan against.
"""

from __future__ import annotations

from om.config import FSO_LOCK_BUCKET, FSO_LOCK_OBJECT_ID
from om.executor.context import Planned
from om.executor.errors import OMError
from om.executor.fso.fs import Resolved, components, ids_of, is_fso, resolve
from om.gatekeeper.lock_plan import Level, LockRequest, Mode, bucket_lock, key_lock
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView

REPLAN_MAX = 8
# The FSO-aware writes and the body field holding their path(s).
_PATHS = {
    om_pb2.CreateDirectory: ("create_directory", ("key",)),
    om_pb2.CreateFile: ("create_file", ("key",)),
    om_pb2.CreateKey: ("create_key", ("key",)),
    om_pb2.CommitKey: ("commit_key", ("key",)),
    om_pb2.DeleteKey: ("delete_key", ("key",)),
    om_pb2.RenameKey: ("rename_key", ("key", "to_key")),
    om_pb2.CompleteMultiPartUpload: ("complete_multipart_upload", ("key",)),
}


# enum members looked up once (a plan is built for every FSO write)
_SLOT, _READ, _WRITE = Level.SLOT, Mode.READ, Mode.WRITE


def _path_locks(resolved: Resolved) -> list[LockRequest]:
    """Shared slots of the ancestors found, the exclusive slot of the first name below
    them (the leaf, or the first missing directory). Each slot has another parent, so
    no resource is named twice."""
    bucket_id = resolved.ids.bucket_id
    locks: list[LockRequest] = []
    parent_id = bucket_id
    for name, found in zip(resolved.parts, resolved.parents, strict=False):
        locks.append(LockRequest(_SLOT, f"{bucket_id}/{parent_id}/{name}", _READ))
        parent_id = found.object_id
    target = resolved.parts[len(resolved.parents)]
    locks.append(LockRequest(_SLOT, f"{bucket_id}/{parent_id}/{target}", _WRITE))
    return locks


def plan_fs_locks(request: om_pb2.OMRequest, view: ReadView, key_name_max_bytes: int,
                  lock_plan: str = FSO_LOCK_OBJECT_ID) -> tuple[LockRequest, ...] | None:
    """The plan of a write on a file-system bucket, in lock order; None for any other
    request (``om.gatekeeper.lock_plan.plan_locks`` plans it). A path the handler will
    refuse locks the bucket only. ``lock_plan`` ``"bucket"``: the bucket's exclusive
    lock alone (see the module docstring)."""
    found = plan_fs(request, view, key_name_max_bytes, lock_plan)
    return None if found is None else found[0]


def plan_fs(request: om_pb2.OMRequest, view: ReadView, key_name_max_bytes: int,
            lock_plan: str = FSO_LOCK_OBJECT_ID
            ) -> tuple[tuple[LockRequest, ...], Planned] | None:
    """``plan_fs_locks``, with the paths it resolved (``ExecContext.planned``): valid
    for an execution on the same state, i.e. at once (in the same turn of the loop)."""
    found = _PATHS.get(request.cmd_type)
    if found is None:
        return None
    field, names = found
    body = getattr(request, field)
    if request.cmd_type == om_pb2.CreateKey and body.multipart_upload_id:
        return None   # a part: an open row keyed by a fresh id, no entry of the tree
    bucket = view.parsed(om_pb2.BUCKET, tables.bucket_key(body.volume, body.bucket),
                         om_pb2.BucketInfo.FromString)
    if bucket is None or not is_fso(bucket):
        return None
    if lock_plan == FSO_LOCK_BUCKET:
        return (bucket_lock(body.volume, body.bucket, Mode.WRITE),), {}
    volume = view.parsed(om_pb2.VOLUME, tables.volume_key(body.volume),
                         om_pb2.VolumeInfo.FromString)
    locks = [bucket_lock(body.volume, body.bucket, Mode.READ)]
    if volume is None:
        return tuple(locks), {}
    ids = ids_of(volume, bucket)
    planned: dict[tuple[str, str, str], tuple[om_pb2.BucketInfo, Resolved]] = {}
    for name in names:
        path = getattr(body, name)
        try:
            parts = components(path, key_name_max_bytes)
        except OMError:
            return tuple(locks), {}   # the handler refuses the path, writing nothing
        resolved = resolve(view, ids, parts)
        planned[(body.volume, body.bucket, path)] = (bucket, resolved)
        locks.extend(_path_locks(resolved))
    if request.cmd_type == om_pb2.CompleteMultiPartUpload:
        # the upload's row, read and removed: commit and abort of a part hold it too
        locks.append(key_lock(body.volume, body.bucket, body.key))
    if len(names) == 1:   # the bucket and one path's slots (and a key): no resource twice
        return tuple(sorted(locks)), planned
    return _in_order(locks), planned


def _in_order(locks: list[LockRequest]) -> tuple[LockRequest, ...]:
    """The locks sorted in the global order, each resource once in its strongest mode."""
    strongest: dict[tuple[Level, str], Mode] = {}
    for lock in locks:
        if strongest.get(lock.resource) is not Mode.WRITE:
            strongest[lock.resource] = lock.mode
    return tuple(sorted(LockRequest(level, name, mode)
                        for (level, name), mode in strongest.items()))
