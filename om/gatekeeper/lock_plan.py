"""Which locks a request takes: Ozone's OBS lock rules, in one total order.

* Volume writes (create, delete, set property): volume write.
* CreateBucket / DeleteBucket: volume read + bucket write; a CreateBucket with a
  space quota takes the volume write lock, because it checks the sum of the
  volume's bucket quotas and two concurrent creates must not both fit.
* SetBucketProperty: volume write + bucket write (same reason).
* CreateKey: bucket read only; the open key is keyed by its session.
* CommitKey, DeleteKey: bucket read + key write.
* RenameKey: bucket read + both keys' write locks, sorted.
* Multipart upload: InitiateMultiPartUpload (and a part's CreateKey) bucket read only,
  its rows keyed by a fresh id; Commit/Complete/AbortMultiPartUpload bucket read + key
  write (Ozone's rule for a commit-part: the part key's lock), as they read, modify
  and write the upload's row; AbortExpiredMultiPartUploads the bucket read and key
  write lock of every upload it names, sorted.
* Add/Remove/SetAcl: the locks a property change of the object takes (volume
  write; volume read + bucket write; bucket read + key write), so the row they
  rewrite has no quota delta or other change in flight.
* Get/Renew/CancelDelegationToken: one write lock shared by every token write
  (``TOKENS``, a name no volume can have), so a secret-key rotation, a token's
  row and the purge of dead rows each have one writer at a time.
* Add/RevokeUserCertificate(s): one write lock shared by both (``USER_CERTIFICATES``),
  so a user's rows, the cap on them and the purge of expired ones have one writer.
* Create/DeleteSnapshot: volume read + bucket write, as a bucket property change: the
  create is a barrier for the bucket's writes (no write of it shares the create's batch).
* Prepare, CancelPrepare, FinalizeUpgrade, SetFlows: one write lock shared by the
  four (``UPGRADE``), so the marker, layout and flow rows have one writer at a time.
* Reads take no locks: they see applied state only.
"""

from __future__ import annotations

import enum
import itertools
from typing import NamedTuple

from om.protocol import om_pb2


class Level(enum.IntEnum):
    """Lock levels, in acquisition order."""

    VOLUME = 0
    BUCKET = 1
    KEY = 2
    SLOT = 3    # a name in a directory of a file-system bucket (om/gatekeeper/fs_locks.py)


class Mode(enum.Enum):
    """Shared or exclusive."""

    READ = "read"
    WRITE = "write"


class LockRequest(NamedTuple):
    """One lock of a plan. Ordering by (level, name) is the global lock order.

    A tuple, not a dataclass: every write builds one to three of these, and a
    frozen dataclass costs several times a tuple to make."""

    level: Level
    name: str
    mode: Mode

    @property
    def resource(self) -> tuple[Level, str]:
        """What the lock protects."""
        return (self.level, self.name)


def _volume(volume: str, mode: Mode) -> LockRequest:
    return LockRequest(Level.VOLUME, volume, mode)


def bucket_lock(volume: str, bucket: str, mode: Mode) -> LockRequest:
    """The lock on a bucket (its name: "volume/bucket")."""
    return LockRequest(Level.BUCKET, f"{volume}/{bucket}", mode)


def key_lock(volume: str, bucket: str, key: str) -> LockRequest:
    """The write lock of one key (by its name, in an object-store bucket's terms)."""
    return LockRequest(Level.KEY, f"{volume}/{bucket}/{key}", Mode.WRITE)


def _volume_plan(request: om_pb2.OMRequest) -> tuple[LockRequest, ...]:
    body = getattr(request, request.WhichOneof("body") or "")
    return (_volume(body.volume, Mode.WRITE),)


def _bucket_plan(request: om_pb2.OMRequest) -> tuple[LockRequest, ...]:
    cmd = request.cmd_type
    body = getattr(request, request.WhichOneof("body") or "")
    volume_mode = Mode.READ
    if cmd == om_pb2.SetBucketProperty or (
            cmd == om_pb2.CreateBucket and body.quota_in_bytes not in (0, -1)):
        volume_mode = Mode.WRITE
    return (_volume(body.volume, volume_mode), bucket_lock(body.volume, body.bucket, Mode.WRITE))


def _key_plan(request: om_pb2.OMRequest) -> tuple[LockRequest, ...]:
    body = getattr(request, request.WhichOneof("body") or "")
    locks = [bucket_lock(body.volume, body.bucket, Mode.READ)]
    if request.cmd_type in _KEY_WRITES:
        locks.append(key_lock(body.volume, body.bucket, body.key))
    elif request.cmd_type == om_pb2.RenameKey:
        names = sorted({body.key, body.to_key})
        locks.extend(key_lock(body.volume, body.bucket, name) for name in names)
    return tuple(locks)


_KEY_WRITES = frozenset({om_pb2.CommitKey, om_pb2.DeleteKey, om_pb2.CommitMultiPartUpload,
                         om_pb2.CompleteMultiPartUpload, om_pb2.AbortMultiPartUpload})


def _expired_uploads_plan(request: om_pb2.OMRequest) -> tuple[LockRequest, ...]:
    uploads = request.abort_expired_multipart_uploads.uploads
    locks = {bucket_lock(u.volume, u.bucket, Mode.READ) for u in uploads}
    locks.update(key_lock(u.volume, u.bucket, u.key) for u in uploads)
    return tuple(sorted(locks))


def _acl_plan(request: om_pb2.OMRequest) -> tuple[LockRequest, ...]:
    obj = getattr(request, request.WhichOneof("body") or "").obj
    if obj.res_type == om_pb2.OzoneObj.VOLUME:
        return (_volume(obj.volume, Mode.WRITE),)
    if obj.res_type == om_pb2.OzoneObj.BUCKET:
        return (_volume(obj.volume, Mode.READ), bucket_lock(obj.volume, obj.bucket, Mode.WRITE))
    assert obj.res_type == om_pb2.OzoneObj.KEY, "the gate refused any other object"
    return (bucket_lock(obj.volume, obj.bucket, Mode.READ),
            key_lock(obj.volume, obj.bucket, obj.key))


TOKENS = "#delegation-tokens"   # '#' is not allowed in a volume name


def _token_plan(request: om_pb2.OMRequest) -> tuple[LockRequest, ...]:
    return (_volume(TOKENS, Mode.WRITE),)


USER_CERTIFICATES = "#user-certificates"


def _certificate_plan(request: om_pb2.OMRequest) -> tuple[LockRequest, ...]:
    return (_volume(USER_CERTIFICATES, Mode.WRITE),)


UPGRADE = "#upgrade"


def _upgrade_plan(request: om_pb2.OMRequest) -> tuple[LockRequest, ...]:
    return (_volume(UPGRADE, Mode.WRITE),)


_PLANNERS = {
    om_pb2.CreateVolume: _volume_plan,
    om_pb2.DeleteVolume: _volume_plan,
    om_pb2.SetVolumeProperty: _volume_plan,
    om_pb2.CreateBucket: _bucket_plan,
    om_pb2.DeleteBucket: _bucket_plan,
    om_pb2.SetBucketProperty: _bucket_plan,
    # an OM snapshot is a barrier for its bucket: the bucket's write lock, held until
    # the create applies, keeps every write of the bucket out of its batch (each is
    # ordered before it or after it; om/executor/om_snapshots/snapshots.py)
    om_pb2.CreateSnapshot: _bucket_plan,
    om_pb2.DeleteSnapshot: _bucket_plan,
    om_pb2.CreateKey: _key_plan,
    om_pb2.CommitKey: _key_plan,
    om_pb2.DeleteKey: _key_plan,
    om_pb2.RenameKey: _key_plan,
    # on an object-store bucket (refused there); om/gatekeeper/fs_locks.py plans them
    # on a file-system bucket
    om_pb2.CreateDirectory: _key_plan,
    om_pb2.CreateFile: _key_plan,
    # a purge step changes unreachable rows and the bucket's counters: the bucket's read
    # lock keeps a bucket property change (which puts the row) out of its batch
    om_pb2.PurgeDirectories: _key_plan,
    # PurgeKeys and DeleteOpenKeys lock nothing: the rows they remove are written once
    # and read by no client write but the one commit of an open session, which removes
    # the same row (om/executor/keys/purge_keys.py, delete_open_keys.py)
    om_pb2.InitiateMultiPartUpload: _key_plan,
    om_pb2.CommitMultiPartUpload: _key_plan,
    om_pb2.CompleteMultiPartUpload: _key_plan,
    om_pb2.AbortMultiPartUpload: _key_plan,
    om_pb2.AbortExpiredMultiPartUploads: _expired_uploads_plan,
    om_pb2.AddAcl: _acl_plan,
    om_pb2.RemoveAcl: _acl_plan,
    om_pb2.SetAcl: _acl_plan,
    om_pb2.GetDelegationToken: _token_plan,
    om_pb2.RenewDelegationToken: _token_plan,
    om_pb2.CancelDelegationToken: _token_plan,
    om_pb2.AddUserCertificate: _certificate_plan,
    om_pb2.RevokeUserCertificates: _certificate_plan,
    om_pb2.Prepare: _upgrade_plan,
    om_pb2.CancelPrepare: _upgrade_plan,
    om_pb2.FinalizeUpgrade: _upgrade_plan,
    om_pb2.SetFlows: _upgrade_plan,
}


def plan_locks(request: om_pb2.OMRequest) -> tuple[LockRequest, ...]:
    """The locks ``request`` must hold from execution until its batch is applied,
    in acquisition order. Empty for reads."""
    planner = _PLANNERS.get(request.cmd_type)
    if planner is None:
        return ()
    plan = planner(request)
    assert all(a[:2] < b[:2] for a, b in itertools.pairwise(plan)), \
        "a plan follows the global lock order, each resource once"
    return plan
