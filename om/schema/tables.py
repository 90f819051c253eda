"""Column families and Ozone's key layout.

Keys are laid out as Ozone's OM lays them out, so the data reads the same way:

* volumeTable          ``/<volume>``
* bucketTable          ``/<volume>/<bucket>``
* keyTable             ``/<volume>/<bucket>/<key>``
* openKeyTable         ``/<volume>/<bucket>/<key>/<client session id>``
* deletedTable         ``/<volume>/<bucket>/<key>/<object id>``
* transactionInfoTable ``#TRANSACTIONINFO``; ``#PREPARED`` while the cluster is prepared
  and ``#LAYOUTVERSION`` (the metadata layout version) once set (om/executor/admin/upgrade.py);
  ``#FLOWS`` (the write types that run the leader flow, om/executor/admin/flow_switch.py):
  written by replicated writes like any row, never by apply itself
* clientRequestReplyTable  ``<client id>#<call id>``
* clientRequestExpiryTable ``<8-byte big-endian ms><client id>#<call id>``: an index
  by time, so expired retry-cache rows are found without scanning the replies.
* secretKeyTable       ``<4-byte big-endian key id>``: the keys that sign delegation tokens
* delegationTokenTable ``<8-byte big-endian max date ms><8-byte big-endian sequence number>``:
  dead tokens (past their max date) first, so they are purged without a scan.

File-system buckets (FILE_SYSTEM_OPTIMIZED) key their rows by object ids, as Ozone's
FSO tables do, so a directory rename rewrites one row whatever lies below it:

* directoryTable         ``/<volume id>/<bucket id>/<parent id>/<name>``
* fileTable              ``/<volume id>/<bucket id>/<parent id>/<name>``
* openFileTable          ``/<volume id>/<bucket id>/<parent id>/<name>/<client session id>``
* deletedDirectoryTable  ``/<volume id>/<bucket id>/<parent id>/<name>/<object id>``

The parent of a bucket's top-level entries is the bucket itself (its object id).
Ids are decimal: a directory's children are the rows under ``fs_prefix``, by name.

Multipart uploads (``om.executor.multipart.uploads``), as Ozone keys them:

* multipartInfoTable   ``/<volume>/<bucket>/<key>/<upload id>``: an upload in progress
  and its committed parts; its openKeyTable row sits under the same key (the upload id
  is the decimal object id that row carries as its session id).

OM snapshots (``om.executor.om_snapshots.snapshots``), as Ozone keys them:

* snapshotInfoTable    ``/<volume>/<bucket>/<snapshot name>``: one row per snapshot

Users' client certificates (``om admin user``):

* userCertificateTable ``<user>\0<serial>``: the client certificates recorded for a user
  (a user name holds no control character, so ``<user>\0`` prefixes exactly its rows).
"""

from __future__ import annotations

import struct
from typing import TypeAlias

from om.protocol import om_pb2

TableId: TypeAlias = om_pb2.Table.ValueType

TABLE_NAMES: dict[TableId, str] = {
    om_pb2.VOLUME: "volumeTable",
    om_pb2.BUCKET: "bucketTable",
    om_pb2.KEY: "keyTable",
    om_pb2.OPEN_KEY: "openKeyTable",
    om_pb2.DELETED: "deletedTable",
    om_pb2.TRANSACTION_INFO: "transactionInfoTable",
    om_pb2.CLIENT_REQUEST_REPLY: "clientRequestReplyTable",
    om_pb2.CLIENT_REQUEST_EXPIRY: "clientRequestExpiryTable",
    om_pb2.SECRET_KEY: "secretKeyTable",
    om_pb2.DELEGATION_TOKEN: "delegationTokenTable",
    om_pb2.DIRECTORY: "directoryTable",
    om_pb2.FILE: "fileTable",
    om_pb2.OPEN_FILE: "openFileTable",
    om_pb2.DELETED_DIRECTORY: "deletedDirectoryTable",
    om_pb2.USER_CERTIFICATE: "userCertificateTable",
    om_pb2.MULTIPART_INFO: "multipartInfoTable",
    om_pb2.SNAPSHOT_INFO: "snapshotInfoTable",
}

# The tables whose rows every shard reads (docs/SHARDS.md, *Rows every shard needs*): a
# volume (its ACLs and owner, for its buckets' requests), a bucket (its shard serves
# it; shard 0 lists a volume's buckets and finds a volume empty or not), the keys that
# sign delegation tokens and the tokens, certificates and their revocations, and the
# transaction-info rows of prepare and upgrade. With S > 1 shards, a write that changes
# nothing else is sealed as a slice every shard applies (om/executor/batcher.py).
# A bucket's usage moves with its keys' writes on its own shard only (quota deltas):
# the other shards' copies show it as of the bucket's last create or property change.
EVERY_SHARDS_TABLES: frozenset[TableId] = frozenset({
    om_pb2.VOLUME, om_pb2.BUCKET, om_pb2.SECRET_KEY, om_pb2.DELEGATION_TOKEN,
    om_pb2.USER_CERTIFICATE, om_pb2.TRANSACTION_INFO})

# Every column family of a store: the tables, and the replica's digests of them
# (om/statemachine/digests.py), which no batch op names and no scan of the tables sees.
DIGEST_TABLE_NAME = "digestTable"
STORE_FAMILIES: dict[TableId, str] = {**TABLE_NAMES, om_pb2.DIGESTS: DIGEST_TABLE_NAME}

TRANSACTION_INFO_KEY = b"#TRANSACTIONINFO"
PREPARED_KEY = b"#PREPARED"
LAYOUT_VERSION_KEY = b"#LAYOUTVERSION"
FLOWS_KEY = b"#FLOWS"
UPGRADE_KEYS = frozenset({PREPARED_KEY, LAYOUT_VERSION_KEY, FLOWS_KEY})
_MS = struct.Struct(">Q")
_KEY_ID = struct.Struct(">I")
_TOKEN = struct.Struct(">QQ")


def volume_key(volume: str) -> bytes:
    """The volumeTable key of a volume."""
    return f"/{volume}".encode()


def bucket_key(volume: str, bucket: str) -> bytes:
    """The bucketTable key of a bucket."""
    return f"/{volume}/{bucket}".encode()


def bucket_prefix(volume: str) -> bytes:
    """The prefix every bucketTable key of a volume starts with."""
    return f"/{volume}/".encode()


def key_key(volume: str, bucket: str, key: str) -> bytes:
    """The keyTable key of a committed key."""
    return f"/{volume}/{bucket}/{key}".encode()


def key_prefix(volume: str, bucket: str) -> bytes:
    """The prefix every keyTable key of a bucket starts with."""
    return f"/{volume}/{bucket}/".encode()


def open_key_key(volume: str, bucket: str, key: str, session_id: int) -> bytes:
    """The openKeyTable key of a key being written by one client session."""
    return f"/{volume}/{bucket}/{key}/{session_id}".encode()


def deleted_key(volume: str, bucket: str, key: str, object_id: int) -> bytes:
    """The deletedTable key of a key version waiting for purge."""
    return f"/{volume}/{bucket}/{key}/{object_id}".encode()


def multipart_key(volume: str, bucket: str, key: str, upload_id: str) -> bytes:
    """The multipartInfoTable key of an upload (also its openKeyTable row's key)."""
    assert upload_id
    return f"/{volume}/{bucket}/{key}/{upload_id}".encode()


def reply_key(client_id: str, call_id: int) -> bytes:
    """The clientRequestReplyTable key of a request."""
    return f"{client_id}#{call_id}".encode()


def expiry_key(timestamp_ms: int, client_id: str, call_id: int) -> bytes:
    """The clientRequestExpiryTable key: time first, so a scan finds the oldest."""
    assert timestamp_ms >= 0
    return _MS.pack(timestamp_ms) + reply_key(client_id, call_id)


def expiry_key_time_ms(key: bytes) -> int:
    """The time an expiry-index key was written at."""
    assert len(key) > _MS.size
    (timestamp_ms,) = _MS.unpack_from(key)
    return int(timestamp_ms)


def expiry_key_reply_key(key: bytes) -> bytes:
    """The clientRequestReplyTable key an expiry-index key points at."""
    return key[_MS.size :]


def expiry_upper_bound(timestamp_ms: int) -> bytes:
    """The first expiry-index key at or after ``timestamp_ms``."""
    return _MS.pack(timestamp_ms)


def secret_key_key(key_id: int) -> bytes:
    """The secretKeyTable key of a secret key: ids ascend with age."""
    return _KEY_ID.pack(key_id)


def delegation_token_key(max_date_ms: int, sequence_number: int) -> bytes:
    """The delegationTokenTable key of a token: by max date, then sequence number."""
    return _TOKEN.pack(max_date_ms, sequence_number)


def delegation_token_key_max_date_ms(key: bytes) -> int:
    """The max date a delegationTokenTable key starts with."""
    assert len(key) == _TOKEN.size
    return int(_TOKEN.unpack(key)[0])


def fs_prefix(volume_id: int, bucket_id: int, parent_id: int) -> bytes:
    """The prefix of every directoryTable or fileTable key of a directory's children."""
    assert volume_id > 0
    assert bucket_id > 0
    assert parent_id > 0
    return f"/{volume_id}/{bucket_id}/{parent_id}/".encode()


def fs_key(volume_id: int, bucket_id: int, parent_id: int, name: str) -> bytes:
    """The directoryTable or fileTable key of the entry ``name`` of a directory."""
    assert name
    assert "/" not in name
    return fs_prefix(volume_id, bucket_id, parent_id) + name.encode()


def fs_name(key: bytes, prefix: bytes) -> str:
    """The entry name of a directoryTable or fileTable key under ``prefix``."""
    assert key.startswith(prefix)
    return key[len(prefix):].decode()


def open_file_key(volume_id: int, bucket_id: int, parent_id: int, name: str,
                  session_id: int) -> bytes:
    """The openFileTable key of a file being written by one client session."""
    return fs_key(volume_id, bucket_id, parent_id, name) + f"/{session_id}".encode()


def deleted_directory_key(volume_id: int, bucket_id: int, parent_id: int, name: str,
                          object_id: int) -> bytes:
    """The deletedDirectoryTable key of a directory deleted with its subtree."""
    return fs_key(volume_id, bucket_id, parent_id, name) + f"/{object_id}".encode()


def user_certificate_prefix(user: str) -> bytes:
    """The prefix every userCertificateTable key of ``user`` starts with."""
    assert "\0" not in user
    return user.encode() + b"\0"


def user_certificate_key(user: str, serial: str) -> bytes:
    """The userCertificateTable key of one certificate of ``user``."""
    return user_certificate_prefix(user) + serial.encode()


def snapshot_key(volume: str, bucket: str, name: str) -> bytes:
    """The snapshotInfoTable key of a snapshot."""
    assert name
    return f"/{volume}/{bucket}/{name}".encode()


def snapshot_prefix(volume: str, bucket: str) -> bytes:
    """The prefix every snapshotInfoTable key of a bucket starts with."""
    return f"/{volume}/{bucket}/".encode()
