"""What ``ozone sh`` prints for volumes, buckets and keys, built from our rows.

Ozone's shell serialises its client objects (``OzoneVolume``, ``OzoneBucket``,
``OzoneKey``, ``OzoneKeyDetails``) with Jackson: one property per public getter,
in field-declaration order (superclass first, getter-only properties last),
nulls left out (``JsonInclude.NON_NULL``), ``Instant`` as an ISO-8601 string
(``JavaTimeModule`` with ``WRITE_DATES_AS_TIMESTAMPS`` off), printed by
``DefaultPrettyPrinter``. The functions here give the same names, order, JSON
types and layout, so scripts written against ``ozone sh`` (``jq .quotaInBytes``)
read ours unchanged. docs/ozone-shell-compat.md lists every field and the ones
we cannot give.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from om.protocol import om_pb2

_FACTOR_NAMES = {1: "ONE", 3: "THREE"}


def iso_instant(ms: int) -> str:
    """``2023-01-05T10:11:12.345Z`` from ms since the epoch, as Java's ``Instant`` prints.

    ``DateTimeFormatter.ISO_INSTANT`` writes the fraction only when it is not
    zero, in groups of three digits; millisecond times need one group at most.
    """
    seconds, millis = divmod(ms, 1000)
    text = datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{millis:03d}Z" if millis else f"{text}Z"


def acl_json(acl: om_pb2.OzoneAcl) -> dict[str, Any]:
    """An ACL entry as Jackson prints Ozone's OzoneAcl (``getacl``, a volume's ``acls``)."""
    return {
        "type": om_pb2.OzoneAcl.Identity.Name(acl.type),
        "name": acl.name,
        "aclScope": om_pb2.OzoneAcl.Scope.Name(acl.scope),
        "aclList": [om_pb2.OzoneAcl.Right.Name(right) for right in acl.rights],
    }


def volume_json(info: om_pb2.VolumeInfo) -> dict[str, Any]:
    """``ozone sh volume info``: OzoneVolume's properties, its ACL entries included."""
    return {
        "metadata": {},
        "name": info.volume,
        "admin": info.admin_name,
        "owner": info.owner_name,
        "quotaInBytes": info.quota_in_bytes,
        "quotaInNamespace": info.quota_in_namespace,
        "usedNamespace": info.used_namespace,
        "creationTime": iso_instant(info.creation_time),
        "modificationTime": iso_instant(info.modification_time),
        "acls": [acl_json(acl) for acl in info.acls],
        "refCount": 0,  # S3 tenants referencing the volume; om has none
    }


def bucket_json(info: om_pb2.BucketInfo) -> dict[str, Any]:
    """``ozone sh bucket info``: OzoneBucket's properties for a plain (non-link) bucket.

    ``storageType`` and ``versioning`` are what Ozone's ``bucket create`` sets
    (DISK, false): om has neither option. Deletes release usage at once (no
    datanodes hold blocks), so nothing is ever pending delete.
    """
    return {
        "metadata": {},
        "volumeName": info.volume_name,
        "name": info.bucket_name,
        "storageType": "DISK",
        "versioning": False,
        "usedBytes": info.used_bytes,
        "usedNamespace": info.used_namespace,
        "creationTime": iso_instant(info.creation_time),
        "modificationTime": iso_instant(info.modification_time),
        "sourcePathExist": True,
        "quotaInBytes": info.quota_in_bytes,
        "quotaInNamespace": info.quota_in_namespace,
        "bucketLayout": info.layout or "OBJECT_STORE",
        "owner": info.owner,
        "pendingDeleteBytes": 0,
        "pendingDeleteNamespace": 0,
        "link": False,
    }


def replication_json(factor: int) -> dict[str, Any]:
    """RatisReplicationConfig as Jackson prints it (om replicates keys as RATIS only)."""
    return {
        "replicationFactor": _FACTOR_NAMES.get(factor, str(factor)),
        "requiredNodes": factor,
        "minimumNodes": 1,
        "replicationType": "RATIS",
    }


def key_json(info: om_pb2.KeyInfo, details: bool = False) -> dict[str, Any]:
    """A ``key list`` entry (OzoneKey) or, with ``details``, ``key info`` (OzoneKeyDetails).

    Details add the block locations (none: om stores no data) and the
    generation (the key's update id, as OmKeyInfo.getGeneration returns).
    """
    data: dict[str, Any] = {
        "volumeName": info.volume_name,
        "bucketName": info.bucket_name,
        "name": info.key_name,
        "dataSize": info.data_size,
        "creationTime": iso_instant(info.creation_time),
        "modificationTime": iso_instant(info.modification_time),
        "replicationConfig": replication_json(info.replication_factor),
        "metadata": {},
        "tags": {},
    }
    if details:
        data["ozoneKeyLocations"] = []
        data["generation"] = info.update_id
    data["file"] = not info.key_name.endswith("/")   # a directory of an FSO bucket lists as "dir/"
    return data


def pretty(value: Any, level: int = 0) -> str:
    """JSON laid out as Jackson's DefaultPrettyPrinter does.

    Objects put each field on its own line, indented two spaces per enclosing
    object, with ``" : "`` between name and value; arrays stay on one line
    (``[ a, b ]``), so a list of objects reads ``[ {`` ... ``}, {`` ... ``} ]``;
    empty ones print as ``{ }`` and ``[ ]``.
    """
    if isinstance(value, dict):
        if not value:
            return "{ }"
        inner = "  " * (level + 1)
        fields = [f"{inner}{json.dumps(k, ensure_ascii=False)} : {pretty(v, level + 1)}"
                  for k, v in value.items()]
        return "{\n" + ",\n".join(fields) + "\n" + "  " * level + "}"
    if isinstance(value, list):
        if not value:
            return "[ ]"
        return "[ " + ", ".join(pretty(item, level) for item in value) + " ]"
    return json.dumps(value, ensure_ascii=False)
