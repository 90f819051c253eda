"""The gate's field checks: every field of every request, once, before any lock or handler.

``problem(request, limits)`` is the refusal of a request one of whose fields
breaks its rule (an ``OMError``: Ozone's status, and a message that starts with
the field, ``create_bucket.bucket: invalid bucket name 'Bad_Name': ...``), or
None. The request template (``om/flows/template.py``) calls it right after the
shape check, for every request the flows answer, before the role, the retry
cache, authorization and the locks; the node (``om/node/node.py``) calls it for
the types it answers itself (ServiceList, integrity, transfer, membership): their
envelope is checked here, their bodies by the modules that answer them.

Invariant: what passes keeps every rule below, so authorization, lock plans and
handlers rely on it (asserting where it matters) and refuse only what depends
on state: a missing row, a quota, a token's signature or dates.

====================  ================================================  =====================
field                 rule                                              status
====================  ================================================  =====================
user, owner, renewer  an identity: at most 255 bytes, no whitespace,    INVALID_REQUEST
                      ':', ',' or control character (a creator gets an
                      ACL entry under that name); empty: anonymous, or
                      the default
client_id             at most 256 bytes, no control character           INVALID_REQUEST
secret_key_candidate  empty or 32 bytes (the node sets it)              INVALID_REQUEST
groups                at most 32 group names (the node sets them from   INVALID_REQUEST
                      the client's certificate)
volume                Ozone's name rules (om/executor/names.py)         INVALID_VOLUME_NAME
bucket                Ozone's name rules                                INVALID_BUCKET_NAME
key, to_key           Ozone's key name rules, ``key_name_max_bytes``     INVALID_KEY_NAME
                      a key a write creates (CreateKey, CreateFile,
                      CreateDirectory, a rename's to_key, an initiate):
                      not under ``.snapshot/``, reserved for snapshots
name (a snapshot)     a volume or bucket name's rules (Ozone's);        INVALID_KEY_NAME
                      CreateSnapshot: empty too (the leader names it)
from_snapshot,        a snapshot name; to_snapshot: empty too (the     INVALID_KEY_NAME
to_snapshot           live bucket)
token (a diff's)      at most 64 characters a diff's pages answer       INVALID_REQUEST
page_size,            at most ``snapshots.DIFF_PAGE_MAX`` / a list      INVALID_REQUEST
max_results           page's ``list_max_keys``
prefix, start_key     what a name of the listed kind may hold           INVALID_REQUEST
max_keys              at most ``list_max_keys`` (0: the default page)   INVALID_REQUEST
quota_in_bytes,       -1 (unlimited) or more; 0 is unlimited (create)   QUOTA_ERROR
quota_in_namespace    or unchanged (set)
data_size             at most 2^60 bytes: replicated sizes and their    INVALID_REQUEST
                      sums stay signed 64-bit numbers
replication_factor    0 (3), 1 or 3                                     INVALID_REQUEST
layout                "", OBJECT_STORE or FILE_SYSTEM_OPTIMIZED         INVALID_REQUEST
rows_max, keys,       a purge step: 1 to ``PURGE_ROWS_MAX`` rows, open  INVALID_REQUEST
open_keys             keys of openKeyTable or openFileTable only
serial                a certificate serial: upper-case hex, <= 20 bytes INVALID_REQUEST
max_rows              at most 1,000 certificates a page                 INVALID_REQUEST
upload_id,            a multipart upload id: the decimal object id an   NO_SUCH_MULTIPART_
multipart_upload_id,  initiate answered (no upload has another);        UPLOAD_ERROR
upload_id_marker      empty: none (CreateKey, the marker)
part_number           1 to 10,000 (S3's range)                          INVALID_REQUEST
part_number_marker    0 to 10,000
parts                 a complete's list: 1 to 10,000 parts, each with a INVALID_REQUEST
                      number in range and a part name of at most
                      ``PART_NAME_MAX_BYTES`` (their order and their
                      being committed are the handler's: Ozone's
                      INVALID_PART_ORDER, INVALID_PART)
drain_timeout_s       a Prepare's wait: 0 (60 s) to 600 s               INVALID_REQUEST
upgrade_client_id     as client_id                                      INVALID_REQUEST
uploads               an expiry step: 1 to ``uploads.UPLOADS_MAX``    INVALID_REQUEST, a
                      uploads, each named validly                       name's status
obj (OzoneObj)        VOLUME, BUCKET or KEY naming exactly its parts,   INVALID_REQUEST, a
                      each valid; PREFIX is not supported               name's status,
                                                                        NOT_SUPPORTED_OPERATION
acl (OzoneAcl)        a valid entry (om/protocol/acls.py) named by an   INVALID_REQUEST
                      identity; SetAcl: at most ``acls.ENTRIES_MAX``
token (TokenProto)    a well-formed delegation token, at most 4 KiB     INVALID_TOKEN
call_id, trace_id,    any value (``cmd_type`` and the body are the
local_read,           shape check's, om/executor/registry.py; the
client_session_id,    intake authenticates OMRequest.token and clears
OMRequest.token,      it before any flow, which never reads it; a
client_version        client_version newer than this server's is a
                      newer client's, served: what an older one may do
                      depends on state, om/gatekeeper/old_clients.py)
====================  ================================================  =====================

The rules are tables (``ENVELOPE``, ``BODIES``) with an entry for every field
of the envelope and of each flow request's body: tests/test_validation.py fails
when a field of ``om.proto`` has none, so a new field needs a decision here.
A rule returns the refusal's status and text, or None; rules that are ``any_value``
cost nothing at run time.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

from om.executor import names
from om.executor.admin import flow_switch, upgrade
from om.executor.context import Limits
from om.executor.errors import OMError
from om.executor.fso.fs import FSO, LAYOUTS, OBS
from om.executor.keys import purge_keys
from om.executor.keys.delete_open_keys import OPEN_TABLES
from om.executor.multipart import uploads
from om.executor.om_snapshots import snapshots
from om.executor.quota import UNLIMITED
from om.executor.registry import KINDS
from om.executor.security import user_certificates
from om.executor.security.tokens import SECRET_BYTES
from om.protocol import acls, om_pb2
from om.protocol.token_format import TOKEN_MAX_BYTES, TokenFormatError, identifier_of

IDENTITY_MAX_BYTES = 255
CLIENT_ID_MAX_BYTES = 256
PURGE_ROWS_MAX = purge_keys.ROWS_MAX
DATA_SIZE_MAX = 1 << 60            # 1 EiB: x3 replicas and sums of them fit in an int64
REPLICATION_FACTORS = (0, 1, 3)

Status: TypeAlias = om_pb2.Status.ValueType
Refusal: TypeAlias = tuple[Status, str]
Rule: TypeAlias = Callable[[Any, Limits], Refusal | None]

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def any_value(value: Any, limits: Limits) -> Refusal | None:
    """Any value is valid (documents a field that needs no check)."""
    return None


# ------------------------------------------------------------------ identities ---

def identity_problem(name: str) -> str | None:
    """Why ``name`` cannot be a user (or an owner, renewer, ACL name), or None."""
    if len(name) * 4 > IDENTITY_MAX_BYTES and len(name.encode()) > IDENTITY_MAX_BYTES:
        return f"longer than {IDENTITY_MAX_BYTES} bytes"
    return acls.name_problem(name)


def identity(value: str, limits: Limits) -> Refusal | None:
    """A user name, or empty."""
    problem = identity_problem(value)
    if problem is None:
        return None
    return om_pb2.INVALID_REQUEST, f"invalid user name {value!r}: {problem}"


def client_id(value: str, limits: Limits) -> Refusal | None:
    """The retry cache's key: short and printable (the shape check refuses it empty)."""
    if len(value) * 4 > CLIENT_ID_MAX_BYTES and len(value.encode()) > CLIENT_ID_MAX_BYTES:
        return om_pb2.INVALID_REQUEST, f"longer than {CLIENT_ID_MAX_BYTES} bytes"
    if _CONTROL.search(value):
        return om_pb2.INVALID_REQUEST, f"{value!r} holds a control character"
    return None


def secret_key_candidate(value: bytes, limits: Limits) -> Refusal | None:
    """Key material the node attaches to a GetDelegationToken (and clears elsewhere)."""
    if len(value) not in (0, SECRET_BYTES):
        return om_pb2.INVALID_REQUEST, f"{len(value)} bytes, not 0 or {SECRET_BYTES}"
    return None


# ----------------------------------------------------------------------- names ---

def volume(value: str, limits: Limits) -> Refusal | None:
    problem = names.name_problem(value)
    if problem is None:
        return None
    return om_pb2.INVALID_VOLUME_NAME, f"invalid volume name {value!r}: {problem}"


def bucket(value: str, limits: Limits) -> Refusal | None:
    problem = names.name_problem(value)
    if problem is None:
        return None
    return om_pb2.INVALID_BUCKET_NAME, f"invalid bucket name {value!r}: {problem}"


def key(value: str, limits: Limits) -> Refusal | None:
    problem = names.key_name_problem(value, limits.key_name_max_bytes)
    if problem is None:
        return None
    return om_pb2.INVALID_KEY_NAME, f"invalid key name {value[:80]!r}: {problem}"


def new_key(value: str, limits: Limits) -> Refusal | None:
    """A key a write creates: a key name, not under the path reserved for snapshots."""
    if snapshots.reserved(value):
        return om_pb2.INVALID_KEY_NAME, (f"cannot create key {value[:80]!r} under path "
                                         f"reserved for snapshots: {snapshots.SNAPSHOT_PREFIX}")
    return key(value, limits)


def snapshot_name(value: str, limits: Limits) -> Refusal | None:
    problem = names.name_problem(value)
    if problem is None:
        return None
    return om_pb2.INVALID_KEY_NAME, f"invalid snapshot name {value[:80]!r}: {problem}"


def snapshot_name_or_empty(value: str, limits: Limits) -> Refusal | None:
    return None if not value else snapshot_name(value, limits)


def diff_token(value: str, limits: Limits) -> Refusal | None:
    if len(value) <= snapshots.TOKEN_MAX_CHARS and value.isascii() and value.isprintable():
        return None
    return om_pb2.INVALID_REQUEST, "not a token a diff's page answered"


def diff_page(value: int, limits: Limits) -> Refusal | None:
    if value <= snapshots.DIFF_PAGE_MAX:
        return None
    return om_pb2.INVALID_REQUEST, f"{value} is over the page limit of {snapshots.DIFF_PAGE_MAX}"


def name_part(value: str, limits: Limits) -> Refusal | None:
    """A volume or bucket listing's prefix or start."""
    problem = names.name_part_problem(value)
    if problem is None:
        return None
    return om_pb2.INVALID_REQUEST, f"{value[:80]!r}: {problem}"


def key_part(value: str, limits: Limits) -> Refusal | None:
    """A key listing's prefix or start."""
    problem = names.key_part_problem(value, limits.key_name_max_bytes)
    if problem is None:
        return None
    return om_pb2.INVALID_REQUEST, f"{value[:80]!r}: {problem}"


def certificate_user(value: str, limits: Limits) -> Refusal | None:
    """The user of a certificate on record: a user name, not empty."""
    problem = user_certificates.name_problem(value, "user")
    return None if problem is None else (om_pb2.INVALID_REQUEST, problem)


def certificate_user_or_empty(value: str, limits: Limits) -> Refusal | None:
    return None if not value else certificate_user(value, limits)


def groups(values: Any, limits: Limits) -> Refusal | None:
    """A certificate's groups (its OU entries): at most ``GROUPS_MAX`` group names."""
    if len(values) > user_certificates.GROUPS_MAX:
        return om_pb2.INVALID_REQUEST, (f"{len(values)} groups: at most "
                                        f"{user_certificates.GROUPS_MAX} per certificate")
    for group in values:
        problem = user_certificates.name_problem(group, "group")
        if problem is not None:
            return om_pb2.INVALID_REQUEST, problem
    return None


def serial(value: str, limits: Limits) -> Refusal | None:
    if user_certificates.SERIAL.fullmatch(value):
        return None
    return om_pb2.INVALID_REQUEST, (f"serial {value[:80]!r} is not upper-case hexadecimal of "
                                    "at most 20 bytes without leading zeros")


def serial_or_empty(value: str, limits: Limits) -> Refusal | None:
    return None if not value else serial(value, limits)


# --------------------------------------------------------------------- numbers ---

def max_keys(value: int, limits: Limits) -> Refusal | None:
    if value > limits.list_max_keys:
        return om_pb2.INVALID_REQUEST, f"{value} is over the limit of {limits.list_max_keys}"
    return None


def certificate_rows(value: int, limits: Limits) -> Refusal | None:
    if value > user_certificates.LIST_PAGE_MAX:
        return om_pb2.INVALID_REQUEST, (f"max rows {value} is over the limit of "
                                        f"{user_certificates.LIST_PAGE_MAX}")
    return None


def quota(value: int, limits: Limits) -> Refusal | None:
    if value < UNLIMITED:
        return om_pb2.QUOTA_ERROR, f"invalid quota {value}: must be positive, or -1 " \
                                   "(unlimited)"
    return None


def data_size(value: int, limits: Limits) -> Refusal | None:
    if value > DATA_SIZE_MAX:
        return om_pb2.INVALID_REQUEST, f"{value} bytes is over the limit of {DATA_SIZE_MAX}"
    return None


def replication_factor(value: int, limits: Limits) -> Refusal | None:
    if value not in REPLICATION_FACTORS:
        return om_pb2.INVALID_REQUEST, f"replication factor {value} is not 1 or 3 (0: 3)"
    return None


def bucket_layout(value: str, limits: Limits) -> Refusal | None:
    if value in LAYOUTS:
        return None
    return om_pb2.INVALID_REQUEST, f"unknown bucket layout {value[:80]!r}: use {OBS} or {FSO}"


def purge_rows(value: int, limits: Limits) -> Refusal | None:
    """A purge step's bound: at least one entry, at most what one batch should carry."""
    if 0 < value <= PURGE_ROWS_MAX:
        return None
    return om_pb2.INVALID_REQUEST, f"{value}: a purge step removes 1 to {PURGE_ROWS_MAX} rows"


def purge_refs(values: Any, limits: Limits) -> Refusal | None:
    """The rows a purge names: 1 to ``PURGE_ROWS_MAX``."""
    if 0 < len(values) <= PURGE_ROWS_MAX:
        return None
    return om_pb2.INVALID_REQUEST, f"a purge names 1 to {PURGE_ROWS_MAX} rows, not {len(values)}"


def open_key_refs(values: Any, limits: Limits) -> Refusal | None:
    """Open-key expiry: 1 to ``PURGE_ROWS_MAX`` rows, of openKeyTable or openFileTable."""
    refusal = purge_refs(values, limits)
    if refusal is None and any(ref.table not in OPEN_TABLES for ref in values):
        return om_pb2.INVALID_REQUEST, "only openKeyTable and openFileTable rows expire"
    return refusal


# ------------------------------------------------------------------- multipart ---

UPLOAD_ID_MAX_DIGITS = 20          # a uint64 in decimal
PART_NAME_MAX_BYTES = 4096


def upload_id(value: str, limits: Limits) -> Refusal | None:
    """An upload id is the decimal object id an initiate answered: nothing else names one."""
    if 0 < len(value) <= UPLOAD_ID_MAX_DIGITS and value.isascii() and value.isdigit() \
            and value[0] != "0":
        return None
    return (om_pb2.NO_SUCH_MULTIPART_UPLOAD_ERROR,
            f"{value[:80]!r} is not an upload id (the decimal number an initiate answers)")


def upload_id_or_empty(value: str, limits: Limits) -> Refusal | None:
    return None if not value else upload_id(value, limits)


def part_number(value: int, limits: Limits) -> Refusal | None:
    if 1 <= value <= uploads.PART_NUMBER_MAX:
        return None
    return om_pb2.INVALID_REQUEST, (f"part number {value} is out of range: 1 to "
                                    f"{uploads.PART_NUMBER_MAX}")


def part_number_marker(value: int, limits: Limits) -> Refusal | None:
    return None if value == 0 else part_number(value, limits)


def parts(values: Any, limits: Limits) -> Refusal | None:
    """A complete's list: 1 to 10,000 parts, numbers in range, names bounded."""
    if not 0 < len(values) <= uploads.PART_NUMBER_MAX:
        return om_pb2.INVALID_REQUEST, (f"a complete lists 1 to {uploads.PART_NUMBER_MAX} "
                                        f"parts, not {len(values)}")
    for n, part in enumerate(values):
        refusal = part_number(part.part_number, limits)
        if refusal is None and len(part.part_name.encode()) > PART_NAME_MAX_BYTES:
            refusal = om_pb2.INVALID_REQUEST, f"a part name over {PART_NAME_MAX_BYTES} bytes"
        if refusal is not None:
            return refusal[0], f"[{n}]: {refusal[1]}"
    return None


def upload_refs(values: Any, limits: Limits) -> Refusal | None:
    """The uploads an expiry step names: 1 to ``UPLOADS_MAX``, each validly named."""
    if not 0 < len(values) <= uploads.UPLOADS_MAX:
        return om_pb2.INVALID_REQUEST, (f"an expiry step names 1 to {uploads.UPLOADS_MAX} "
                                        f"uploads, not {len(values)}")
    for n, ref in enumerate(values):
        for name, rule in (("volume", volume), ("bucket", bucket), ("key", key),
                           ("upload_id", upload_id)):
            refusal = rule(getattr(ref, name), limits)
            if refusal is not None:
                return refusal[0], f"[{n}].{name}: {refusal[1]}"
    return None


# ------------------------------------------------------------- nested messages ---

_OBJECT_PARTS: dict[int, tuple[tuple[str, Rule], ...]] = {
    om_pb2.OzoneObj.VOLUME: (("volume", volume),),
    om_pb2.OzoneObj.BUCKET: (("volume", volume), ("bucket", bucket)),
    om_pb2.OzoneObj.KEY: (("volume", volume), ("bucket", bucket), ("key", key)),
}


def ozone_obj(obj: om_pb2.OzoneObj, limits: Limits) -> Refusal | None:
    """What an ACL request names: its type, exactly the parts that type has, each valid."""
    kind = obj.res_type
    if kind == om_pb2.OzoneObj.PREFIX:
        return (om_pb2.NOT_SUPPORTED_OPERATION, "prefix ACLs are not supported: om keeps no "
                "prefix table; set DEFAULT ACLs on the bucket, or ACLs on the keys")
    parts = _OBJECT_PARTS.get(kind)
    if parts is None:
        return om_pb2.INVALID_REQUEST, f"unknown ACL object type {kind}"
    needed = tuple(name for name, _ in parts)
    given = tuple(name for name in ("volume", "bucket", "key") if getattr(obj, name))
    if given != needed:
        return (om_pb2.INVALID_REQUEST,
                f"a {om_pb2.OzoneObj.ResourceType.Name(kind).lower()} ACL names "
                f"{' and '.join(needed)}, not {' and '.join(given) or 'nothing'}")
    for name, rule in parts:
        refusal = rule(getattr(obj, name), limits)
        if refusal is not None:
            return refusal[0], f"{name}: {refusal[1]}"
    return None


def acl(entry: om_pb2.OzoneAcl, limits: Limits) -> Refusal | None:
    """One ACL entry: valid as om/protocol/acls.py says, and its name an identity."""
    try:
        checked = acls.from_proto(entry)
    except acls.AclError as error:
        return om_pb2.INVALID_REQUEST, f"invalid ACL: {error}"
    problem = identity_problem(checked.name)
    if problem is not None:
        return om_pb2.INVALID_REQUEST, f"invalid ACL name {checked.name[:80]!r}: {problem}"
    return None


def acl_list(entries: Any, limits: Limits) -> Refusal | None:
    """SetAcl's entries: each valid, at most ``acls.ENTRIES_MAX`` of them."""
    if len(entries) > acls.ENTRIES_MAX:
        return om_pb2.INVALID_REQUEST, f"{len(entries)} entries, more than an object holds " \
                                       f"({acls.ENTRIES_MAX})"
    for n, entry in enumerate(entries):
        refusal = acl(entry, limits)
        if refusal is not None:
            return refusal[0], f"[{n}]: {refusal[1]}"
    return None


def drain_timeout(value: int, limits: Limits) -> Refusal | None:
    """A Prepare's wait for the writes in flight: 0 (the default) to the maximum."""
    if value > upgrade.DRAIN_TIMEOUT_MAX_S:
        return om_pb2.INVALID_REQUEST, (f"{value} s is more than the "
                                        f"{upgrade.DRAIN_TIMEOUT_MAX_S} s a Prepare may wait")
    return None


def flow_types(value: Sequence[int], limits: Limits) -> Refusal | None:
    """A SetFlows selection: write types only, SetFlows not among them (it always runs
    the leader flow; om/executor/admin/flow_switch.py)."""
    wrong = {t for t in value if t not in KINDS or not KINDS[t].write or t == om_pb2.SetFlows}
    if wrong:
        return om_pb2.INVALID_REQUEST, (f"not a write type that can switch flows: "
                                        f"{flow_switch.type_names(frozenset(wrong))}")
    return None


def token(value: om_pb2.TokenProto, limits: Limits) -> Refusal | None:
    """A delegation token's shape (its signature and dates are the handler's)."""
    if value.ByteSize() > TOKEN_MAX_BYTES:
        return om_pb2.INVALID_TOKEN, f"a token is at most {TOKEN_MAX_BYTES} bytes"
    try:
        identifier_of(value)
    except TokenFormatError as error:
        return om_pb2.INVALID_TOKEN, str(error)
    return None


# ---------------------------------------------------------------------- tables ---

ENVELOPE: dict[str, Rule] = {
    "cmd_type": any_value, "client_id": client_id, "call_id": any_value, "user": identity,
    "trace_id": any_value, "local_read": any_value, "token": any_value,
    "secret_key_candidate": secret_key_candidate, "groups": groups,
    "client_version": any_value,
}

_PAGING_NAMES: dict[str, Rule] = {"prefix": name_part, "start_key": name_part, "max_keys": max_keys}
_QUOTAS: dict[str, Rule] = {"quota_in_bytes": quota, "quota_in_namespace": quota}
_BUCKET: dict[str, Rule] = {"volume": volume, "bucket": bucket}
_KEY: dict[str, Rule] = {**_BUCKET, "key": key}
_NEW_KEY: dict[str, Rule] = {**_BUCKET, "key": new_key}
_SNAPSHOT: dict[str, Rule] = {**_BUCKET, "name": snapshot_name}

BODIES: dict[int, Mapping[str, Rule]] = {
    om_pb2.CreateVolume: {"volume": volume, "owner": identity, **_QUOTAS},
    om_pb2.SetVolumeProperty: {"volume": volume, "owner": identity, **_QUOTAS},
    om_pb2.InfoVolume: {"volume": volume},
    om_pb2.DeleteVolume: {"volume": volume},
    om_pb2.ListVolume: _PAGING_NAMES,
    om_pb2.CreateBucket: {**_BUCKET, "owner": identity, **_QUOTAS, "layout": bucket_layout},
    om_pb2.InfoBucket: _BUCKET,
    om_pb2.SetBucketProperty: {**_BUCKET, **_QUOTAS},
    om_pb2.DeleteBucket: _BUCKET,
    om_pb2.ListBuckets: {"volume": volume, **_PAGING_NAMES},
    om_pb2.CreateKey: {**_NEW_KEY, "data_size": data_size,
                       "replication_factor": replication_factor,
                       "multipart_upload_id": upload_id_or_empty},
    om_pb2.CommitKey: {**_KEY, "client_session_id": any_value, "data_size": data_size},
    om_pb2.LookupKey: _KEY,
    om_pb2.DeleteKey: {**_KEY, "recursive": any_value},
    om_pb2.RenameKey: {**_KEY, "to_key": new_key},
    om_pb2.ListKeys: {**_BUCKET, "prefix": key_part, "start_key": key_part,
                      "max_keys": max_keys},
    om_pb2.AddAcl: {"obj": ozone_obj, "acl": acl},
    om_pb2.RemoveAcl: {"obj": ozone_obj, "acl": acl},
    om_pb2.SetAcl: {"obj": ozone_obj, "acl": acl_list},
    om_pb2.GetAcl: {"obj": ozone_obj},
    om_pb2.GetDelegationToken: {"renewer": identity},
    om_pb2.RenewDelegationToken: {"token": token},
    om_pb2.CancelDelegationToken: {"token": token},
    # file-system buckets: a path is a key name; its elements (no empty one, no '.'
    # or '..') are the path resolver's (om/executor/fso/fs.py), as only an FSO bucket
    # splits it, and the layout is state
    om_pb2.CreateDirectory: _NEW_KEY,
    om_pb2.CreateFile: {**_NEW_KEY, "data_size": data_size,
                        "replication_factor": replication_factor, "recursive": any_value,
                        "overwrite": any_value},
    om_pb2.LookupFile: _KEY,
    om_pb2.GetFileStatus: _KEY,
    om_pb2.ListStatus: {**_BUCKET, "key": key_part, "recursive": any_value,
                        "start_key": key_part, "num_entries": max_keys},
    # the leader's own (refused from clients): checked all the same
    om_pb2.PurgeDirectories: {**_BUCKET, "rows_max": purge_rows},
    om_pb2.PurgeKeys: {"keys": purge_refs, "retired_before_ms": any_value},
    om_pb2.DeleteOpenKeys: {"open_keys": open_key_refs, "created_before_ms": any_value},
    # multipart upload: whether parts are listed in order and committed is state
    om_pb2.InitiateMultiPartUpload: {**_NEW_KEY, "replication_factor": replication_factor},
    om_pb2.CommitMultiPartUpload: {**_KEY, "upload_id": upload_id, "part_number": part_number,
                                   "client_session_id": any_value, "data_size": data_size},
    om_pb2.CompleteMultiPartUpload: {**_KEY, "upload_id": upload_id, "parts": parts},
    om_pb2.AbortMultiPartUpload: {**_KEY, "upload_id": upload_id},
    om_pb2.ListMultiPartUploadParts: {**_KEY, "upload_id": upload_id,
                                      "part_number_marker": part_number_marker,
                                      "max_parts": max_keys},
    om_pb2.ListMultipartUploads: {**_BUCKET, "prefix": key_part, "key_marker": key_part,
                                  "upload_id_marker": upload_id_or_empty,
                                  "max_uploads": max_keys},
    om_pb2.AbortExpiredMultiPartUploads: {"uploads": upload_refs,
                                          "created_before_ms": any_value},
    # OM snapshots: whether the bucket and snapshot exist, the per-bucket limit and the
    # disk headroom are state (om/executor/om_snapshots/snapshots.py)
    om_pb2.CreateSnapshot: {**_BUCKET, "name": snapshot_name_or_empty},
    om_pb2.DeleteSnapshot: _SNAPSHOT,
    om_pb2.GetSnapshotInfo: _SNAPSHOT,
    om_pb2.ListSnapshot: {**_BUCKET, "prefix": name_part, "start_after": name_part,
                          "max_results": max_keys},
    om_pb2.SnapshotDiff: {**_BUCKET, "from_snapshot": snapshot_name,
                          "to_snapshot": snapshot_name_or_empty, "token": diff_token,
                          "page_size": diff_page},
    # users' certificates (administrators only): not_after against the clock is state
    om_pb2.AddUserCertificate: {"user": certificate_user, "serial": serial, "groups": groups,
                                "not_after": any_value},
    om_pb2.RevokeUserCertificates: {"user": certificate_user},
    om_pb2.ListUserCertificates: {"start_after_user": certificate_user_or_empty,
                                  "start_after_serial": serial_or_empty,
                                  "max_rows": certificate_rows},
    # prepare and upgrade (administrators only, om/executor/admin/upgrade.py)
    om_pb2.Prepare: {"drain_timeout_s": drain_timeout},
    om_pb2.PrepareStatus: {},
    om_pb2.CancelPrepare: {},
    om_pb2.FinalizeUpgrade: {"upgrade_client_id": client_id},
    om_pb2.FinalizeUpgradeProgress: {"upgrade_client_id": client_id},
    # the flow switch (administrators only): which types may switch is the handler's
    om_pb2.SetFlows: {"leader_types": flow_types},
    om_pb2.FlowStatus: {},
}


def _active(rules: Mapping[str, Rule]) -> tuple[tuple[str, Rule], ...]:
    return tuple((name, rule) for name, rule in rules.items() if rule is not any_value)


_ENVELOPE_RULES = _active(ENVELOPE)
_BODY_RULES = {cmd: _active(rules) for cmd, rules in BODIES.items()}


def problem(request: om_pb2.OMRequest, limits: Limits) -> OMError | None:
    """The refusal of ``request`` when a field breaks its rule (the first, in table
    order: the envelope, then the body), or None. The shape check passed: a type
    with body rules carries its body."""
    for name, rule in _ENVELOPE_RULES:
        refusal = rule(getattr(request, name), limits)
        if refusal is not None:
            return OMError(refusal[0], f"{name}: {refusal[1]}")
    rules = _BODY_RULES.get(request.cmd_type)
    if rules is None:
        return None
    field = request.WhichOneof("body")
    assert field is not None, "the shape check guarantees the body"
    body = getattr(request, field)
    for name, rule in rules:
        refusal = rule(getattr(body, name), limits)
        if refusal is not None:
            return OMError(refusal[0], f"{field}.{name}: {refusal[1]}")
    return None
