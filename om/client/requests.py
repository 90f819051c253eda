"""Building requests, shared by both clients. Ids and user are filled in at send.

Every request built here carries this client's protocol version, ``CURRENT_VERSION``
(om/protocol/client_version.py; the client stamps it again at send), so a request
handed to a service in-process reads as a current client's, as it does on the wire.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

from om.protocol import om_pb2
from om.protocol.client_version import CURRENT_VERSION

_request = partial(om_pb2.OMRequest, client_version=CURRENT_VERSION)


def create_volume(volume: str, quota_in_bytes: int = 0, quota_in_namespace: int = 0,
                  owner: str = "") -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.CreateVolume, create_volume=om_pb2.CreateVolumeRequest(
        volume=volume, quota_in_bytes=quota_in_bytes, quota_in_namespace=quota_in_namespace,
        owner=owner))


def set_volume_property(volume: str, quota_in_bytes: int = 0, quota_in_namespace: int = 0,
                        owner: str = "") -> om_pb2.OMRequest:
    return _request(
        cmd_type=om_pb2.SetVolumeProperty,
        set_volume_property=om_pb2.SetVolumePropertyRequest(
            volume=volume, quota_in_bytes=quota_in_bytes, quota_in_namespace=quota_in_namespace,
            owner=owner))


def info_volume(volume: str) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.InfoVolume,
                    info_volume=om_pb2.InfoVolumeRequest(volume=volume))


def delete_volume(volume: str) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.DeleteVolume,
                    delete_volume=om_pb2.DeleteVolumeRequest(volume=volume))


def list_volumes(prefix: str = "", start_key: str = "", max_keys: int = 0) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.ListVolume, list_volume=om_pb2.ListVolumeRequest(
        prefix=prefix, start_key=start_key, max_keys=max_keys))


def create_bucket(volume: str, bucket: str, quota_in_bytes: int = 0,
                  quota_in_namespace: int = 0, owner: str = "",
                  layout: str = "") -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.CreateBucket, create_bucket=om_pb2.CreateBucketRequest(
        volume=volume, bucket=bucket, quota_in_bytes=quota_in_bytes,
        quota_in_namespace=quota_in_namespace, owner=owner, layout=layout))


def set_bucket_property(volume: str, bucket: str, quota_in_bytes: int = 0,
                        quota_in_namespace: int = 0) -> om_pb2.OMRequest:
    return _request(
        cmd_type=om_pb2.SetBucketProperty,
        set_bucket_property=om_pb2.SetBucketPropertyRequest(
            volume=volume, bucket=bucket, quota_in_bytes=quota_in_bytes,
            quota_in_namespace=quota_in_namespace))


def info_bucket(volume: str, bucket: str) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.InfoBucket,
                    info_bucket=om_pb2.InfoBucketRequest(volume=volume, bucket=bucket))


def delete_bucket(volume: str, bucket: str) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.DeleteBucket,
                    delete_bucket=om_pb2.DeleteBucketRequest(volume=volume, bucket=bucket))


def list_buckets(volume: str, prefix: str = "", start_key: str = "",
                 max_keys: int = 0) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.ListBuckets, list_buckets=om_pb2.ListBucketsRequest(
        volume=volume, prefix=prefix, start_key=start_key, max_keys=max_keys))


def create_key(volume: str, bucket: str, key: str, data_size: int = 0,
               replication_factor: int = 0, upload_id: str = "") -> om_pb2.OMRequest:
    """Opens a key, or with ``upload_id`` a part of that multipart upload."""
    return _request(cmd_type=om_pb2.CreateKey, create_key=om_pb2.CreateKeyRequest(
        volume=volume, bucket=bucket, key=key, data_size=data_size,
        replication_factor=replication_factor, multipart_upload_id=upload_id))


def initiate_multipart_upload(volume: str, bucket: str, key: str,
                              replication_factor: int = 0) -> om_pb2.OMRequest:
    return _request(
        cmd_type=om_pb2.InitiateMultiPartUpload,
        initiate_multipart_upload=om_pb2.InitiateMultiPartUploadRequest(
            volume=volume, bucket=bucket, key=key, replication_factor=replication_factor))


def commit_multipart_upload(volume: str, bucket: str, key: str, upload_id: str,
                            part_number: int, session_id: int,
                            data_size: int) -> om_pb2.OMRequest:
    return _request(
        cmd_type=om_pb2.CommitMultiPartUpload,
        commit_multipart_upload=om_pb2.CommitMultiPartUploadRequest(
            volume=volume, bucket=bucket, key=key, upload_id=upload_id,
            part_number=part_number, client_session_id=session_id, data_size=data_size))


def complete_multipart_upload(volume: str, bucket: str, key: str, upload_id: str,
                              parts: list[tuple[int, str]]) -> om_pb2.OMRequest:
    """``parts``: (part number, part name or "") in ascending part number."""
    return _request(
        cmd_type=om_pb2.CompleteMultiPartUpload,
        complete_multipart_upload=om_pb2.CompleteMultiPartUploadRequest(
            volume=volume, bucket=bucket, key=key, upload_id=upload_id,
            parts=[om_pb2.MultipartPart(part_number=n, part_name=name) for n, name in parts]))


def abort_multipart_upload(volume: str, bucket: str, key: str,
                           upload_id: str) -> om_pb2.OMRequest:
    return _request(
        cmd_type=om_pb2.AbortMultiPartUpload,
        abort_multipart_upload=om_pb2.AbortMultiPartUploadRequest(
            volume=volume, bucket=bucket, key=key, upload_id=upload_id))


def list_multipart_upload_parts(volume: str, bucket: str, key: str, upload_id: str,
                                part_number_marker: int = 0,
                                max_parts: int = 0) -> om_pb2.OMRequest:
    return _request(
        cmd_type=om_pb2.ListMultiPartUploadParts,
        list_multipart_upload_parts=om_pb2.ListMultiPartUploadPartsRequest(
            volume=volume, bucket=bucket, key=key, upload_id=upload_id,
            part_number_marker=part_number_marker, max_parts=max_parts))


def list_multipart_uploads(volume: str, bucket: str, prefix: str = "", key_marker: str = "",
                           upload_id_marker: str = "", max_uploads: int = 0) -> om_pb2.OMRequest:
    return _request(
        cmd_type=om_pb2.ListMultipartUploads,
        list_multipart_uploads=om_pb2.ListMultipartUploadsRequest(
            volume=volume, bucket=bucket, prefix=prefix, key_marker=key_marker,
            upload_id_marker=upload_id_marker, max_uploads=max_uploads))


def commit_key(volume: str, bucket: str, key: str, session_id: int,
               data_size: int) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.CommitKey, commit_key=om_pb2.CommitKeyRequest(
        volume=volume, bucket=bucket, key=key, client_session_id=session_id,
        data_size=data_size))


def lookup_key(volume: str, bucket: str, key: str) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.LookupKey, lookup_key=om_pb2.LookupKeyRequest(
        volume=volume, bucket=bucket, key=key))


def delete_key(volume: str, bucket: str, key: str, recursive: bool = False) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.DeleteKey, delete_key=om_pb2.DeleteKeyRequest(
        volume=volume, bucket=bucket, key=key, recursive=recursive))


def create_directory(volume: str, bucket: str, path: str) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.CreateDirectory,
                    create_directory=om_pb2.CreateDirectoryRequest(
                        volume=volume, bucket=bucket, key=path))


def create_file(volume: str, bucket: str, path: str, data_size: int = 0,
                recursive: bool = False, overwrite: bool = False,
                replication_factor: int = 0) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.CreateFile, create_file=om_pb2.CreateFileRequest(
        volume=volume, bucket=bucket, key=path, data_size=data_size, recursive=recursive,
        overwrite=overwrite, replication_factor=replication_factor))


def lookup_file(volume: str, bucket: str, path: str) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.LookupFile, lookup_file=om_pb2.LookupFileRequest(
        volume=volume, bucket=bucket, key=path))


def get_file_status(volume: str, bucket: str, path: str) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.GetFileStatus,
                    get_file_status=om_pb2.GetFileStatusRequest(
                        volume=volume, bucket=bucket, key=path))


def list_status(volume: str, bucket: str, path: str = "", recursive: bool = False,
                start_key: str = "", num_entries: int = 0) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.ListStatus, list_status=om_pb2.ListStatusRequest(
        volume=volume, bucket=bucket, key=path, recursive=recursive, start_key=start_key,
        num_entries=num_entries))


def rename_key(volume: str, bucket: str, key: str, to_key: str) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.RenameKey, rename_key=om_pb2.RenameKeyRequest(
        volume=volume, bucket=bucket, key=key, to_key=to_key))


def list_keys(volume: str, bucket: str, prefix: str = "", start_key: str = "",
              max_keys: int = 0) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.ListKeys, list_keys=om_pb2.ListKeysRequest(
        volume=volume, bucket=bucket, prefix=prefix, start_key=start_key, max_keys=max_keys))


def service_list() -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.ServiceList,
                    service_list=om_pb2.ServiceListRequest())


def acl_object(volume: str, bucket: str = "", key: str = "") -> om_pb2.OzoneObj:
    """The OzoneObj of a volume, a bucket (with ``bucket``) or a key (with both)."""
    kind = (om_pb2.OzoneObj.KEY if key else
            om_pb2.OzoneObj.BUCKET if bucket else om_pb2.OzoneObj.VOLUME)
    return om_pb2.OzoneObj(res_type=kind, volume=volume, bucket=bucket, key=key)


def add_acl(obj: om_pb2.OzoneObj, acl: om_pb2.OzoneAcl) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.AddAcl,
                    add_acl=om_pb2.AddAclRequest(obj=obj, acl=acl))


def remove_acl(obj: om_pb2.OzoneObj, acl: om_pb2.OzoneAcl) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.RemoveAcl,
                    remove_acl=om_pb2.RemoveAclRequest(obj=obj, acl=acl))


def set_acl(obj: om_pb2.OzoneObj, acls: list[om_pb2.OzoneAcl]) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.SetAcl,
                    set_acl=om_pb2.SetAclRequest(obj=obj, acl=acls))


def get_acl(obj: om_pb2.OzoneObj) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.GetAcl, get_acl=om_pb2.GetAclRequest(obj=obj))


def get_delegation_token(renewer: str = "") -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.GetDelegationToken,
                    get_delegation_token=om_pb2.GetDelegationTokenRequest(renewer=renewer))


def renew_delegation_token(token: om_pb2.TokenProto) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.RenewDelegationToken,
                    renew_delegation_token=om_pb2.RenewDelegationTokenRequest(token=token))


def cancel_delegation_token(token: om_pb2.TokenProto) -> om_pb2.OMRequest:
    return _request(
        cmd_type=om_pb2.CancelDelegationToken,
        cancel_delegation_token=om_pb2.CancelDelegationTokenRequest(token=token))


def add_user_certificate(user: str, serial: str, groups: tuple[str, ...],
                         not_after_ms: int) -> om_pb2.OMRequest:
    return _request(
        cmd_type=om_pb2.AddUserCertificate,
        add_user_certificate=om_pb2.AddUserCertificateRequest(
            user=user, serial=serial, groups=groups, not_after=not_after_ms))


def revoke_user_certificates(user: str) -> om_pb2.OMRequest:
    return _request(
        cmd_type=om_pb2.RevokeUserCertificates,
        revoke_user_certificates=om_pb2.RevokeUserCertificatesRequest(user=user))


def list_user_certificates(start_after_user: str = "", start_after_serial: str = "",
                           max_rows: int = 0) -> om_pb2.OMRequest:
    return _request(
        cmd_type=om_pb2.ListUserCertificates,
        list_user_certificates=om_pb2.ListUserCertificatesRequest(
            start_after_user=start_after_user, start_after_serial=start_after_serial,
            max_rows=max_rows))


# ------------------------------------------------------------- OM snapshots ---

def create_snapshot(volume: str, bucket: str, name: str = "") -> om_pb2.OMRequest:
    """A snapshot of the bucket (empty name: the leader names it, as Ozone)."""
    return _request(cmd_type=om_pb2.CreateSnapshot,
                    create_snapshot=om_pb2.CreateSnapshotRequest(
                        volume=volume, bucket=bucket, name=name))


def delete_snapshot(volume: str, bucket: str, name: str) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.DeleteSnapshot,
                    delete_snapshot=om_pb2.DeleteSnapshotRequest(
                        volume=volume, bucket=bucket, name=name))


def get_snapshot_info(volume: str, bucket: str, name: str) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.GetSnapshotInfo,
                    get_snapshot_info=om_pb2.GetSnapshotInfoRequest(
                        volume=volume, bucket=bucket, name=name))


def list_snapshots(volume: str, bucket: str, prefix: str = "", start_after: str = "",
                   max_results: int = 0) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.ListSnapshot,
                    list_snapshot=om_pb2.ListSnapshotRequest(
                        volume=volume, bucket=bucket, prefix=prefix,
                        start_after=start_after, max_results=max_results))


def snapshot_diff(volume: str, bucket: str, from_snapshot: str, to_snapshot: str = "",
                  token: str = "", page_size: int = 0) -> om_pb2.OMRequest:
    """Keys that differ from ``from_snapshot`` to ``to_snapshot`` (empty: the live bucket)."""
    return _request(cmd_type=om_pb2.SnapshotDiff,
                    snapshot_diff=om_pb2.SnapshotDiffRequest(
                        volume=volume, bucket=bucket, from_snapshot=from_snapshot,
                        to_snapshot=to_snapshot, token=token, page_size=page_size))


def snapshot_key(name: str, key: str = "") -> str:
    """The key name that reads ``key`` in snapshot ``name`` (Ozone's ``.snapshot/NAME/``)."""
    return f".snapshot/{name}/{key}"
def prepare(drain_timeout_s: int = 0) -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.Prepare,
                    prepare=om_pb2.PrepareRequest(drain_timeout_s=drain_timeout_s))


def prepare_status() -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.PrepareStatus,
                    prepare_status=om_pb2.PrepareStatusRequest())


def cancel_prepare() -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.CancelPrepare,
                    cancel_prepare=om_pb2.CancelPrepareRequest())


def finalize_upgrade(upgrade_client_id: str = "") -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.FinalizeUpgrade,
                    finalize_upgrade=om_pb2.FinalizeUpgradeRequest(
                        upgrade_client_id=upgrade_client_id))


def finalize_upgrade_progress(upgrade_client_id: str = "") -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.FinalizeUpgradeProgress,
                    finalize_upgrade_progress=om_pb2.FinalizeUpgradeProgressRequest(
                        upgrade_client_id=upgrade_client_id))


def set_flows(leader_types: Iterable[int]) -> om_pb2.OMRequest:
    """SetFlows: these write types run the leader flow, every other the old flow."""
    return _request(cmd_type=om_pb2.SetFlows, set_flows=om_pb2.SetFlowsRequest(
        leader_types=[om_pb2.Type.ValueType(t) for t in leader_types]))


def flow_status() -> om_pb2.OMRequest:
    return _request(cmd_type=om_pb2.FlowStatus, flow_status=om_pb2.FlowStatusRequest())
