"""The wire contract: generated code matches the .proto; published numbers never move."""

from __future__ import annotations

from pathlib import Path

from om.protocol import generate, om_pb2

PROTOCOL_DIR = Path(generate.__file__).parent

# Published numbers: Ozone's ResultCodes and Type values, plus our own above 1000.
FROZEN_STATUS = {
    "OK": 1, "VOLUME_NOT_FOUND": 3, "VOLUME_NOT_EMPTY": 4, "VOLUME_ALREADY_EXISTS": 5,
    "USER_NOT_FOUND": 6, "USER_TOO_MANY_VOLUMES": 7, "BUCKET_NOT_FOUND": 8,
    "BUCKET_NOT_EMPTY": 9, "BUCKET_ALREADY_EXISTS": 10, "KEY_ALREADY_EXISTS": 11,
    "KEY_NOT_FOUND": 12,
    "INVALID_KEY_NAME": 13, "INTERNAL_ERROR": 15, "METADATA_ERROR": 19,
    "INVALID_AUTH_METHOD": 33, "INVALID_TOKEN": 34, "TOKEN_EXPIRED": 35, "INVALID_REQUEST": 39,
    "TOKEN_CREATION_ERROR": 43, "FILE_NOT_FOUND": 44, "DIRECTORY_NOT_FOUND": 45,
    "FILE_ALREADY_EXISTS": 46, "NOT_A_FILE": 47, "CANNOT_CREATE_DIRECTORY_AT_ROOT": 59,
    "DIRECTORY_ALREADY_EXISTS": 60, "DIRECTORY_NOT_EMPTY": 68, "RENAME_OPEN_FILE": 90,
    "PERMISSION_DENIED": 48, "TIMEOUT": 49, "INVALID_BUCKET_NAME": 58,
    "INVALID_VOLUME_NAME": 61, "NOT_SUPPORTED_OPERATION": 64, "QUOTA_EXCEEDED": 66,
    "QUOTA_ERROR": 67, "UNAUTHORIZED": 91, "TOO_MANY_BUCKETS": 94, "NOT_LEADER": 1001,
    "LEADER_NOT_READY": 1002,
    "SERVER_BUSY": 1003, "REPLICA_DIVERGED": 1004, "TRANSFER_REFUSED": 1005,
    "MEMBERSHIP_REFUSED": 1006, "WRONG_SHARD": 1007, "NO_SUCH_MULTIPART_UPLOAD_ERROR": 26,
    "ENTITY_TOO_SMALL": 30,
    "INVALID_PART": 55, "INVALID_PART_ORDER": 56, "INVALID_SNAPSHOT_ERROR": 87,
    "CONTAINS_SNAPSHOT": 88,
    "PREPARE_FAILED": 73, "NOT_SUPPORTED_OPERATION_WHEN_PREPARED": 74,
    "NOT_SUPPORTED_OPERATION_PRIOR_FINALIZATION": 75,
}
FROZEN_TYPE = {
    "CreateVolume": 11, "SetVolumeProperty": 12, "InfoVolume": 14, "DeleteVolume": 15,
    "ListVolume": 16, "CreateBucket": 21, "InfoBucket": 22, "SetBucketProperty": 23,
    "DeleteBucket": 24, "ListBuckets": 25, "CreateKey": 31, "LookupKey": 32, "RenameKey": 33,
    "DeleteKey": 34, "ListKeys": 35, "CommitKey": 36, "ServiceList": 51,
    "GetDelegationToken": 61, "RenewDelegationToken": 62, "CancelDelegationToken": 63,
    "GetFileStatus": 70, "CreateDirectory": 71, "CreateFile": 72, "LookupFile": 73,
    "ListStatus": 74, "AddAcl": 75, "RemoveAcl": 76, "SetAcl": 77, "GetAcl": 78,
    "PurgeKeys": 81, "DeleteOpenKeys": 86, "PurgeDirectories": 95,
    "InitiateMultiPartUpload": 45, "CommitMultiPartUpload": 46, "CompleteMultiPartUpload": 47,
    "AbortMultiPartUpload": 48, "ListMultiPartUploadParts": 50, "ListMultipartUploads": 82,
    "AbortExpiredMultiPartUploads": 127,
    "CreateSnapshot": 112, "ListSnapshot": 113, "SnapshotDiff": 114, "DeleteSnapshot": 115,
    "GetSnapshotInfo": 130,
    "FinalizeUpgrade": 54, "FinalizeUpgradeProgress": 55, "Prepare": 56, "PrepareStatus": 57,
    "CancelPrepare": 58,
    "PersistDb": 138,
    "StartVerify": 2001, "GetVerifyTrees": 2002, "MarkDiverged": 2004,
    "AuditReplica": 2005, "TransferLeadership": 2006, "ChangeMembership": 2007,
    "ReadVerifyLeaves": 2014, "ScrubReplica": 2015,
    "AddUserCertificate": 2008, "RevokeUserCertificates": 2009, "ListUserCertificates": 2010,
}
FROZEN_TABLE = {"VOLUME": 1, "BUCKET": 2, "KEY": 3, "OPEN_KEY": 4, "DELETED": 5,
                "TRANSACTION_INFO": 6, "CLIENT_REQUEST_REPLY": 7, "CLIENT_REQUEST_EXPIRY": 8,
                "SECRET_KEY": 9, "DELEGATION_TOKEN": 10, "DIRECTORY": 11, "FILE": 12,
                "OPEN_FILE": 13, "DELETED_DIRECTORY": 14,
                "USER_CERTIFICATE": 15, "MULTIPART_INFO": 16,
                "SNAPSHOT_INFO": 17, "DIGESTS": 18}


def test_generated_module_matches_proto(tmp_path: Path) -> None:
    generate.generate(tmp_path)
    for name in ("om_pb2.py", "om_pb2.pyi"):
        fresh = (tmp_path / name).read_text()
        checked_in = (PROTOCOL_DIR / name).read_text()
        assert fresh == checked_in, f"{name} drifted from om.proto: run om/protocol/generate.py"


def test_status_numbers_are_frozen() -> None:
    for name, number in FROZEN_STATUS.items():
        assert om_pb2.Status.Value(name) == number, name


def test_no_status_was_removed_or_renumbered_silently() -> None:
    published = set(FROZEN_STATUS) | {"STATUS_UNSPECIFIED"}
    assert set(om_pb2.Status.keys()) == published, "add new statuses to FROZEN_STATUS"


def test_type_and_table_numbers_are_frozen() -> None:
    for name, number in FROZEN_TYPE.items():
        assert om_pb2.Type.Value(name) == number, name
    for name, number in FROZEN_TABLE.items():
        assert om_pb2.Table.Value(name) == number, name
