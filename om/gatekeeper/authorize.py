"""Authorization: ownership checks, permissive unless ACLs are enabled.

Like Ozone with ``ozone.acl.enabled = false`` (its default), everything is
allowed unless ``acl_enabled``. With it on: volume writes and listing all
volumes need an administrator; bucket writes need the volume's owner; key
requests and bucket reads need the bucket's owner or the volume's owner.
Administrators may do everything.
"""

from __future__ import annotations

from dataclasses import dataclass

from om.executor.errors import OMError
from om.executor.read_view import ReadView
from om.protocol import om_pb2
from om.statemachine import tables
from om.statemachine.tables import TableId

_ADMIN_ONLY = {om_pb2.CreateVolume, om_pb2.DeleteVolume, om_pb2.SetVolumeProperty,
               om_pb2.ListVolume}
_VOLUME_OWNER = {om_pb2.CreateBucket, om_pb2.DeleteBucket, om_pb2.SetBucketProperty,
                 om_pb2.ListBuckets, om_pb2.InfoVolume}


@dataclass(frozen=True)
class AclPolicy:
    """Whether ACLs are enforced, and who the administrators are."""

    acl_enabled: bool = False
    admins: frozenset[str] = frozenset()


def _owner(view: ReadView, table: TableId, key: bytes) -> str | None:
    raw = view.get(table, key)
    if raw is None:
        return None
    if table == om_pb2.VOLUME:
        return om_pb2.VolumeInfo.FromString(raw).owner_name
    return om_pb2.BucketInfo.FromString(raw).owner


def authorize(request: om_pb2.OMRequest, view: ReadView, policy: AclPolicy) -> None:
    """Raises PERMISSION_DENIED when ``request.user`` may not run ``request``.

    A missing volume or bucket is left to the handler (it reports NOT_FOUND).
    """
    if not policy.acl_enabled or request.user in policy.admins:
        return
    cmd = request.cmd_type
    if cmd in _ADMIN_ONLY:
        raise OMError(om_pb2.PERMISSION_DENIED,
                      f"User '{request.user}' is not an administrator")
    body = getattr(request, request.WhichOneof("body") or "")
    volume_owner = _owner(view, om_pb2.VOLUME, tables.volume_key(body.volume))
    if cmd in _VOLUME_OWNER:
        allowed = {volume_owner}
    else:
        bucket_owner = _owner(view, om_pb2.BUCKET, tables.bucket_key(body.volume, body.bucket))
        allowed = {volume_owner, bucket_owner}
    if None in allowed and len(allowed) == 1:
        return
    if request.user not in allowed:
        raise OMError(om_pb2.PERMISSION_DENIED,
                      f"User '{request.user}' may not run {om_pb2.Type.Name(cmd)} on "
                      f"/{body.volume}")
