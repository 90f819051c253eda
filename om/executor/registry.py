"""The table of request types: handler, body field, and whether it writes.

``dispatch`` is the one way to run a handler: it checks the request's shape,
turns an ``OMError`` into a response with that status, and guarantees that a
request ending in an error leaves the recorder empty.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from om.executor.acls import add_acl, get_acl, remove_acl, set_acl
from om.executor.admin import flow_switch, upgrade
from om.executor.buckets import (
    create_bucket,
    delete_bucket,
    info_bucket,
    list_buckets,
    set_bucket_property,
)
from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.errors import OMError
from om.executor.fso import fso_keys
from om.executor.keys import (
    commit_key,
    create_key,
    delete_key,
    delete_open_keys,
    list_keys,
    lookup_key,
    purge_keys,
    rename_key,
)
from om.executor.multipart import uploads
from om.executor.om_snapshots import snapshots
from om.executor.security import (
    add_user_certificate,
    cancel_delegation_token,
    get_delegation_token,
    list_user_certificates,
    renew_delegation_token,
    revoke_user_certificates,
)
from om.executor.volumes import (
    create_volume,
    delete_volume,
    info_volume,
    list_volume,
    set_volume_property,
)
from om.protocol import om_pb2
from om.schema.read_view import ReadView

Execute = Callable[[om_pb2.OMRequest, ReadView, ChangeRecorder, ExecContext], om_pb2.OMResponse]


@dataclass(frozen=True)
class RequestKind:
    """How one request type is handled; ``internal``: only the leader issues it (a
    client's is refused at the intake)."""

    name: str
    body_field: str
    write: bool
    execute: Execute
    internal: bool = False


def _kind(cmd: int, body_field: str, write: bool, execute: Execute,
          internal: bool = False) -> tuple[int, RequestKind]:
    return cmd, RequestKind(om_pb2.Type.Name(cmd), body_field, write, execute,  # type: ignore[arg-type]
                            internal)


KINDS: dict[int, RequestKind] = dict([
    _kind(om_pb2.CreateVolume, "create_volume", True, create_volume.execute),
    _kind(om_pb2.SetVolumeProperty, "set_volume_property", True, set_volume_property.execute),
    _kind(om_pb2.InfoVolume, "info_volume", False, info_volume.execute),
    _kind(om_pb2.DeleteVolume, "delete_volume", True, delete_volume.execute),
    _kind(om_pb2.ListVolume, "list_volume", False, list_volume.execute),
    _kind(om_pb2.CreateBucket, "create_bucket", True, create_bucket.execute),
    _kind(om_pb2.InfoBucket, "info_bucket", False, info_bucket.execute),
    _kind(om_pb2.SetBucketProperty, "set_bucket_property", True, set_bucket_property.execute),
    _kind(om_pb2.DeleteBucket, "delete_bucket", True, delete_bucket.execute),
    _kind(om_pb2.ListBuckets, "list_buckets", False, list_buckets.execute),
    _kind(om_pb2.CreateKey, "create_key", True, create_key.execute),
    _kind(om_pb2.CommitKey, "commit_key", True, commit_key.execute),
    _kind(om_pb2.LookupKey, "lookup_key", False, lookup_key.execute),
    _kind(om_pb2.ListKeys, "list_keys", False, list_keys.execute),
    _kind(om_pb2.DeleteKey, "delete_key", True, delete_key.execute),
    _kind(om_pb2.RenameKey, "rename_key", True, rename_key.execute),
    _kind(om_pb2.CreateDirectory, "create_directory", True, fso_keys.create_directory),
    _kind(om_pb2.CreateFile, "create_file", True, fso_keys.create_file),
    # each also reads a snapshot's tree: .snapshot/<name>/<path>
    # (om/executor/om_snapshots/snapshots.py)
    _kind(om_pb2.LookupFile, "lookup_file", False,
          snapshots.file_system_read(fso_keys.lookup_file)),
    _kind(om_pb2.GetFileStatus, "get_file_status", False,
          snapshots.file_system_read(fso_keys.get_file_status)),
    _kind(om_pb2.ListStatus, "list_status", False,
          snapshots.file_system_read(fso_keys.list_status)),
    _kind(om_pb2.PurgeDirectories, "purge_directories", True, fso_keys.purge_directories,
          internal=True),
    _kind(om_pb2.PurgeKeys, "purge_keys", True, purge_keys.execute, internal=True),
    _kind(om_pb2.DeleteOpenKeys, "delete_open_keys", True, delete_open_keys.execute,
          internal=True),
    _kind(om_pb2.InitiateMultiPartUpload, "initiate_multipart_upload", True, uploads.initiate),
    _kind(om_pb2.CommitMultiPartUpload, "commit_multipart_upload", True, uploads.commit_part),
    _kind(om_pb2.CompleteMultiPartUpload, "complete_multipart_upload", True, uploads.complete),
    _kind(om_pb2.AbortMultiPartUpload, "abort_multipart_upload", True, uploads.abort),
    _kind(om_pb2.ListMultiPartUploadParts, "list_multipart_upload_parts", False,
          uploads.list_parts),
    _kind(om_pb2.ListMultipartUploads, "list_multipart_uploads", False, uploads.list_uploads),
    _kind(om_pb2.AbortExpiredMultiPartUploads, "abort_expired_multipart_uploads", True,
          uploads.abort_expired, internal=True),
    _kind(om_pb2.CreateSnapshot, "create_snapshot", True, snapshots.create),
    _kind(om_pb2.DeleteSnapshot, "delete_snapshot", True, snapshots.delete),
    _kind(om_pb2.GetSnapshotInfo, "get_snapshot_info", False, snapshots.info),
    _kind(om_pb2.ListSnapshot, "list_snapshot", False, snapshots.list_snapshots),
    _kind(om_pb2.SnapshotDiff, "snapshot_diff", False, snapshots.diff),
    _kind(om_pb2.AddAcl, "add_acl", True, add_acl.execute),
    _kind(om_pb2.RemoveAcl, "remove_acl", True, remove_acl.execute),
    _kind(om_pb2.SetAcl, "set_acl", True, set_acl.execute),
    _kind(om_pb2.GetAcl, "get_acl", False, get_acl.execute),
    _kind(om_pb2.GetDelegationToken, "get_delegation_token", True, get_delegation_token.execute),
    _kind(om_pb2.RenewDelegationToken, "renew_delegation_token", True,
          renew_delegation_token.execute),
    _kind(om_pb2.CancelDelegationToken, "cancel_delegation_token", True,
          cancel_delegation_token.execute),
    _kind(om_pb2.AddUserCertificate, "add_user_certificate", True,
          add_user_certificate.execute),
    _kind(om_pb2.RevokeUserCertificates, "revoke_user_certificates", True,
          revoke_user_certificates.execute),
    _kind(om_pb2.ListUserCertificates, "list_user_certificates", False,
          list_user_certificates.execute),
    _kind(om_pb2.Prepare, "prepare", True, upgrade.prepare),
    _kind(om_pb2.PrepareStatus, "prepare_status", False, upgrade.prepare_status),
    _kind(om_pb2.CancelPrepare, "cancel_prepare", True, upgrade.cancel_prepare),
    _kind(om_pb2.FinalizeUpgrade, "finalize_upgrade", True, upgrade.finalize_upgrade),
    _kind(om_pb2.FinalizeUpgradeProgress, "finalize_upgrade_progress", False,
          upgrade.finalize_upgrade_progress),
    _kind(om_pb2.SetFlows, "set_flows", True, flow_switch.set_flows),
    _kind(om_pb2.FlowStatus, "flow_status", False, flow_switch.flow_status),
])


def error_response(request: om_pb2.OMRequest, status: om_pb2.Status.ValueType,
                   message: str) -> om_pb2.OMResponse:
    """A response carrying a non-OK status for ``request``."""
    assert status != om_pb2.OK
    return om_pb2.OMResponse(cmd_type=request.cmd_type, status=status, message=message,
                             call_id=request.call_id)


def shape_problem(request: om_pb2.OMRequest) -> str | None:
    """Why the request cannot be dispatched, or None when it can."""
    kind = KINDS.get(request.cmd_type)
    if kind is None:
        return f"unknown or unsupported command type {request.cmd_type}"
    if request.WhichOneof("body") != kind.body_field:
        return f"{kind.name} request must carry a {kind.body_field} body"
    if not request.client_id:
        return "request carries no client_id"
    return None


def dispatch(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
             ctx: ExecContext) -> om_pb2.OMResponse:
    """Runs the request's handler; an error status leaves ``recorder`` empty."""
    assert recorder.empty
    assert shape_problem(request) is None
    kind = KINDS[request.cmd_type]
    try:
        response = kind.execute(request, view, recorder, ctx)
    except OMError as error:
        recorder.clear()
        return error_response(request, error.status, error.message)
    assert kind.write or recorder.empty
    response.cmd_type = request.cmd_type
    response.status = om_pb2.OK
    response.call_id = request.call_id
    return response
