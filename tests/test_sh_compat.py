"""``om sh`` against a real ``om serve``: a table of commands from Ozone's shell behaviour.

The rows follow Ozone's own smoke tests (hadoop-ozone/dist/src/main/smoketest/
basic/ozone-shell-lib.robot: what each command prints, its exit code, the JSON
fields scripts read with jq) and the shell's handlers (list flags, addresses,
clrquota). They run in order against one server started for the module: later
rows see what earlier rows made. Commands run in-process through ``om.cli.main``
(a subprocess each would cost ~0.4 s of interpreter start); two rows at the end
run ``python -m om`` to check the real process exit status.
"""

from __future__ import annotations

import getpass
import io
import json
import re
import subprocess
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from om import cli
from om.client import OMClient
from tests.processes import REPO, ServerProcess, free_port, om_command

pytestmark = pytest.mark.integration

USAGE, FAILED = 2, 255
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z$")
TB = 1 << 40

# Field -> JSON type, in the order Ozone's Jackson mapper prints them.
VOLUME_FIELDS: dict[str, type] = {
    "metadata": dict, "name": str, "admin": str, "owner": str, "quotaInBytes": int,
    "quotaInNamespace": int, "usedNamespace": int, "creationTime": str,
    "modificationTime": str, "acls": list, "refCount": int}
BUCKET_FIELDS: dict[str, type] = {
    "metadata": dict, "volumeName": str, "name": str, "storageType": str, "versioning": bool,
    "usedBytes": int, "usedNamespace": int, "creationTime": str, "modificationTime": str,
    "sourcePathExist": bool, "quotaInBytes": int, "quotaInNamespace": int,
    "bucketLayout": str, "owner": str, "pendingDeleteBytes": int,
    "pendingDeleteNamespace": int, "link": bool}
KEY_FIELDS: dict[str, type] = {
    "volumeName": str, "bucketName": str, "name": str, "dataSize": int, "creationTime": str,
    "modificationTime": str, "replicationConfig": dict, "metadata": dict, "tags": dict,
    "file": bool}
KEY_INFO_FIELDS: dict[str, type] = {
    **{k: v for k, v in KEY_FIELDS.items() if k != "file"},
    "ozoneKeyLocations": list, "generation": int, "file": bool}
ACL_FIELDS: dict[str, type] = {"type": str, "name": str, "aclScope": str, "aclList": list}
ME = getpass.getuser()
REPLICATION_FIELDS: dict[str, type] = {
    "replicationFactor": str, "requiredNodes": int, "minimumNodes": int, "replicationType": str}


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@dataclass
class Shell:
    """Runs ``om sh --om ADDRESS ...`` in this process."""

    address: str
    files: Path

    def __call__(self, *args: str) -> Result:
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = cli.main(["sh", "--om", self.address, *args])
            except SystemExit as exit_:
                code = int(exit_.code or 0)
        return Result(code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def shell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shell]:
    root = tmp_path_factory.mktemp("sh")
    (root / "empty.txt").write_bytes(b"")
    (root / "NOTICE.txt").write_bytes(b"x" * 3841)
    server = ServerProcess(root / "data", free_port())
    try:
        _load_listing_data(server.address)
        yield Shell(server.address, root)
    finally:
        server.kill()


def _load_listing_data(address: str) -> None:
    """/lst with buckets bk1..bk5, 120 keys in bk1 and one in bk2; /other owned by another."""
    with OMClient([address]) as client:
        client.create_volume("lst")
        client.create_volume("other", owner="someone-else")
        for n in range(1, 6):
            client.create_bucket("lst", f"bk{n}")
        for i in range(120):
            client.put_key("lst", "bk1", f"k{i:03d}", 10)
        client.put_key("lst", "bk2", "k000", 10)


# ------------------------------------------------------------------ checks ---

Check = Callable[[Result, Shell], None]


def shaped(fields: dict[str, type], data: dict[str, Any]) -> None:
    """``data`` has exactly these fields, in this order, with these JSON types."""
    assert list(data) == list(fields)
    for name, kind in fields.items():
        assert type(data[name]) is kind, f"{name}: {data[name]!r} is not {kind.__name__}"
    for name in ("creationTime", "modificationTime"):
        if name in data:
            assert ISO.match(data[name]), data[name]
    if "replicationConfig" in data:
        shaped(REPLICATION_FIELDS, data["replicationConfig"])


def empty(result: Result, _: Shell) -> None:
    assert result.out == ""


def err_has(text: str) -> Check:
    def check(result: Result, _: Shell) -> None:
        assert text in result.err
    return check


def err_starts(text: str) -> Check:
    def check(result: Result, _: Shell) -> None:
        assert result.err.startswith(text), result.err
    return check


def out_is(text: str) -> Check:
    def check(result: Result, _: Shell) -> None:
        assert result.out == text
    return check


def volume_info(**expected: Any) -> Check:
    def check(result: Result, _: Shell) -> None:
        assert result.out.startswith('{\n  "metadata" : { },\n  "name" : ')
        data = result.json()
        shaped(VOLUME_FIELDS, data)
        assert {k: data[k] for k in expected} == expected
    return check


def bucket_info(**expected: Any) -> Check:
    def check(result: Result, _: Shell) -> None:
        data = result.json()
        shaped(BUCKET_FIELDS, data)
        assert {k: data[k] for k in expected} == expected
    return check


def key_info(**expected: Any) -> Check:
    def check(result: Result, _: Shell) -> None:
        data = result.json()
        shaped(KEY_INFO_FIELDS, data)
        assert {k: data[k] for k in expected} == expected
    return check


def listed(fields: dict[str, type], names: list[str], more: bool = False) -> Check:
    """A JSON array of these names, each entry shaped; ``more``: the 'Listing first' note."""
    def check(result: Result, _: Shell) -> None:
        data = result.json()
        assert isinstance(data, list)
        assert [entry["name"] for entry in data] == names
        for entry in data:
            shaped(fields, entry)
        if data:
            assert result.out.startswith("[ {\n")
        assert ("Listing first" in result.err) is more, result.err
    return check


def names_count(count: int, first: str, last: str, more: bool = False) -> Check:
    def check(result: Result, _: Shell) -> None:
        names = [entry["name"] for entry in result.json()]
        assert (len(names), names[0], names[-1]) == (count, first, last)
        assert ("Listing first" in result.err) is more
    return check


def volume_names(*wanted: str, absent: tuple[str, ...] = ()) -> Check:
    def check(result: Result, _: Shell) -> None:
        names = [entry["name"] for entry in result.json()]
        for entry in result.json():
            shaped(VOLUME_FIELDS, entry)
        assert all(name in names for name in wanted), names
        assert not any(name in names for name in absent), names
    return check


def has_acl(kind: str, name: str, scope: str, *rights: str) -> Check:
    """getacl's JSON lists an entry of this type, name and scope holding these rights
    (the smoke test's ``jq 'select(...) | .aclList | contains([...])'``)."""
    def check(result: Result, _: Shell) -> None:
        data = result.json()
        for entry in data:
            shaped(ACL_FIELDS, entry)
        assert any((e["type"], e["name"], e["aclScope"]) == (kind, name, scope)
                   and set(rights) <= set(e["aclList"]) for e in data), data
    return check


def arrays_per_bucket(*sizes: int) -> Check:
    """``key list /vol``: Ozone prints one JSON array per bucket, one after another."""
    def check(result: Result, _: Shell) -> None:
        decoder, text, pos, found = json.JSONDecoder(), result.out, 0, []
        while text[pos:].strip():
            value, end = decoder.raw_decode(text, pos)
            found.append(len(value))
            pos = end + 1
        assert found == list(sizes)
    return check


# ------------------------------------------------------------------- table ---

@dataclass(frozen=True)
class Row:
    args: tuple[str, ...]
    code: int
    check: Check | None = None


def row(command: str, code: int = 0, check: Check | None = None) -> Row:
    return Row(tuple(command.split()), code, check)


TABLE: list[tuple[str, Row]] = [
    # --- volumes (ozone-shell-lib.robot "Test ozone shell") ---
    ("volume-info-missing", row("volume info /vol1", FAILED, err_starts("VOLUME_NOT_FOUND "))),
    ("volume-create", row("volume create /vol1 --space-quota 100TB --namespace-quota 100",
                          0, empty)),
    ("volume-create-exists", row("volume create /vol1", FAILED,
                                 err_starts("VOLUME_ALREADY_EXISTS "))),
    ("volume-list", row("volume list /", 0, volume_names("vol1", "lst", absent=("other",)))),
    ("volume-ls-alias", row("volume ls", 0, volume_names("vol1"))),
    ("vol-alias", row("vol info /vol1", 0, volume_info(name="vol1"))),
    ("volume-setquota", row("volume setquota /vol1 --space-quota 10TB --namespace-quota 100",
                            0, empty)),
    ("volume-info", row("volume info /vol1", 0,
                        volume_info(name="vol1", quotaInBytes=10 * TB, quotaInNamespace=100,
                                    usedNamespace=0, refCount=0))),
    ("volume-info-trailing-slash", row("volume info /vol1/", 0, volume_info(name="vol1"))),
    ("volume-info-short-uri", row("volume info vol1", 0, volume_info(name="vol1"))),
    ("volume-info-bucket-uri", row("volume info /vol1/bb1", USAGE,
                                   err_has("Delimiters (/) not allowed in volume name"))),
    ("volume-create-bad-quota", row("volume create /volx --space-quota 1.5GB", FAILED,
                                    err_has("1.5GB is invalid"))),
    ("volume-create-bad-ns-quota", row("volume create /volx --namespace-quota 1.5", FAILED,
                                       err_has("1.5 is invalid"))),
    ("volume-create-bad-name", row("volume create /Bad_Vol", FAILED,
                                   err_starts("INVALID_VOLUME_NAME "))),
    ("volume-create-owner", row("volume create /volu --user bob", 0, empty)),
    ("volume-info-owner", row("volume info /volu", 0, volume_info(owner="bob"))),
    ("volume-update-owner", row("volume update /volu --user carol", 0,
                                volume_info(owner="carol"))),
    ("volume-info-updated", row("volume info /volu", 0, volume_info(owner="carol"))),
    ("volume-list-user", row("volume list / --user carol", 0,
                             volume_names("volu", absent=("vol1",)))),
    ("volume-setquota-no-flag", row("volume setquota /vol1", FAILED,
                                    err_has("At least one of the quota set flag is required"))),
    # --- buckets ---
    ("bucket-create", row("bucket create /vol1/bb1 --space-quota 10TB --namespace-quota 100",
                          0, empty)),
    ("bucket-info", row("bucket info /vol1/bb1", 0,
                        bucket_info(name="bb1", volumeName="vol1", storageType="DISK",
                                    quotaInBytes=10 * TB, quotaInNamespace=100, usedBytes=0,
                                    bucketLayout="OBJECT_STORE", link=False))),
    ("bucket-setquota", row("bucket setquota /vol1/bb1 --space-quota 1TB --namespace-quota 1000",
                            0, empty)),
    ("bucket-info-trailing-slash", row("bucket info /vol1/bb1/", 0,
                                       bucket_info(quotaInBytes=TB, quotaInNamespace=1000))),
    ("bucket-info-o3-uri", row("bucket info o3:///vol1/bb1", 0, bucket_info(name="bb1"))),
    ("bucket-list", row("bucket list /vol1/", 0, listed(BUCKET_FIELDS, ["bb1"]))),
    ("bucket-info-no-bucket", row("bucket info /vol1//", USAGE,
                                  err_has("Bucket name is required"))),
    ("bucket-create-bad-name", row("bucket create /vol1/bucket_1", FAILED,
                                   err_starts("INVALID_BUCKET_NAME "))),
    ("bucket-create-bad-layout", row("bucket create /vol1/bb2 --layout Invalid", USAGE)),
    ("bucket-create-fso-no-quota", row("bucket create /vol1/fsob --layout fso", FAILED,
                                       err_starts("QUOTA_ERROR "))),
    ("bucket-create-fso", row("bucket create /vol1/fsob --layout fso --quota 1GB", 0, empty)),
    ("bucket-info-fso", row("bucket info /vol1/fsob", 0,
                            bucket_info(bucketLayout="FILE_SYSTEM_OPTIMIZED"))),
    ("bucket-delete-fso", row("bucket delete /vol1/fsob", 0,
                              out_is("Bucket fsob is deleted\n"))),
    ("bucket-create-obs", row("bucket create /vol1/bb2 -l obs --user dora --quota 1GB", 0,
                              empty)),
    ("bucket-info-obs", row("bucket info /vol1/bb2", 0,
                            bucket_info(owner="dora", bucketLayout="OBJECT_STORE"))),
    ("bucket-create-bad-quota", row("bucket create /vol1/bb3 --space-quota 1.5GB", FAILED,
                                    err_has("1.5GB is invalid"))),
    ("bucket-setquota-bad-quota", row("bucket setquota vol1/bb1 --namespace-quota 1.5", FAILED,
                                      err_has("1.5 is invalid"))),
    # --- keys ("Test key handling") ---
    ("key-put-metadata", row("key put /vol1/bb1/key1 --size 3841", 0, empty)),
    ("key-put-empty-file", row("key put /vol1/bb1/empty {files}/empty.txt", 0, empty)),
    ("key-put-content", row("key put /vol1/bb1/key2 {files}/NOTICE.txt", FAILED,
                            err_has("not supported: metadata only"))),
    ("key-put-missing-file", row("key put /vol1/bb1/key2 sample.txt", FAILED,
                                 err_has("File not found: sample.txt"))),
    ("key-put-ratis-one", row("key put -t RATIS -r ONE /vol1/bb1/key1_RATIS --size 10", 0,
                              empty)),
    ("key-put-ec", row("key put -t EC /vol1/bb1/key_ec --size 10", FAILED,
                       err_has("not supported"))),
    ("key-info", row("key info /vol1/bb1/key1", 0,
                     key_info(name="key1", volumeName="vol1", bucketName="bb1", dataSize=3841,
                              ozoneKeyLocations=[]))),
    ("key-info-ratis-one", row("key info /vol1/bb1/key1_RATIS", 0,
                               key_info(replicationConfig={
                                   "replicationFactor": "ONE", "requiredNodes": 1,
                                   "minimumNodes": 1, "replicationType": "RATIS"}))),
    ("key-info-missing", row("key info /vol1/bb1/non-existing", FAILED,
                             err_starts("KEY_NOT_FOUND "))),
    ("key-info-bucket-uri", row("key info /vol1/bb1", USAGE, err_has("Key name is missing"))),
    ("bucket-info-used", row("bucket info /vol1/bb1", 0,
                             bucket_info(usedBytes=3841 * 3 + 10, usedNamespace=3))),
    ("key-list", row("key list /vol1/bb1", 0,
                     listed(KEY_FIELDS, ["empty", "key1", "key1_RATIS"]))),
    ("key-rename", row("key rename /vol1/bb1 key1 key2", 0, empty)),
    ("key-rename-trailing-slash", row("key rename /vol1/bb1/ key2 key3", 0, empty)),
    ("key-list-renamed", row("key ls /vol1/bb1/", 0,
                             listed(KEY_FIELDS, ["empty", "key1_RATIS", "key3"]))),
    ("key-cat", row("key cat /vol1/bb1/key3", FAILED, err_has("not supported: metadata only"))),
    ("key-get", row("key get /vol1/bb1/key3 {files}/out.txt", FAILED,
                    err_has("not supported: metadata only"))),
    ("key-cp", row("key cp /vol1/bb1 key3 key4", FAILED,
                   err_has("not supported: metadata only"))),
    ("key-checksum", row("key checksum /vol1/bb1/key3", FAILED,
                         err_has("not supported: metadata only"))),
    ("key-rewrite", row("key rewrite -r ONE /vol1/bb1/key3", FAILED,
                        err_has("not supported: metadata only"))),
    ("key-delete", row("key delete /vol1/bb1/key3", 0, empty)),
    ("key-delete-missing", row("key delete /vol1/bb1/key3", FAILED,
                               err_starts("KEY_NOT_FOUND "))),
    # --- clrquota ---
    ("volume-clrquota-space", row("volume clrquota --space-quota /vol1", 0, empty)),
    ("volume-clrquota-namespace", row("volume clrquota --namespace-quota /vol1", 0, empty)),
    ("volume-info-cleared", row("volume info /vol1", 0,
                                volume_info(quotaInBytes=-1, quotaInNamespace=-1))),
    ("bucket-clrquota-space", row("bucket clrquota --space-quota /vol1/bb1", 0, empty)),
    ("bucket-clrquota-namespace", row("bucket clrquota /vol1/bb1 --namespace-quota", 0, empty)),
    ("bucket-info-cleared", row("bucket info /vol1/bb1", 0,
                                bucket_info(quotaInBytes=-1, quotaInNamespace=-1))),
    ("volume-clrquota-no-flag", row("volume clrquota /vol1", FAILED,
                                    err_has("At least one of the quota clear flag is required"))),
    ("bucket-setquota-2kb", row("bucket setquota vol1/bb2 --space-quota 2KB", 0, empty)),
    ("key-put-over-quota", row("key put vol1/bb2/key1 --size 3841", FAILED,
                               err_starts("QUOTA_EXCEEDED "))),
    ("volume-setquota-under-buckets", row("volume setquota vol1 --space-quota 1KB", FAILED,
                                          err_starts("QUOTA_EXCEEDED "))),
    # --- deletes ---
    ("bucket-delete-not-empty", row("bucket delete /vol1/bb1", FAILED,
                                    err_starts("BUCKET_NOT_EMPTY "))),
    ("bucket-delete-recursive", row("bucket delete -r --yes /vol1/bb1", 0,
                                    out_is("Bucket bb1 is deleted\n"))),
    ("bucket-delete", row("bucket delete /vol1/bb2", 0, out_is("Bucket bb2 is deleted\n"))),
    ("volume-delete", row("volume delete /vol1", 0, out_is("Volume vol1 is deleted\n"))),
    ("volume-recreate", row("volume create /vol1", 0, empty)),
    ("volume-info-unset-quota", row("volume info /vol1", 0,
                                    volume_info(quotaInBytes=-1, quotaInNamespace=-1))),
    ("bucket-recreate", row("bucket create /vol1/bb1", 0, empty)),
    ("bucket-info-unset-quota", row("bucket info /vol1/bb1", 0,
                                    bucket_info(quotaInBytes=-1, quotaInNamespace=-1))),
    ("volume-delete-recursive", row("volume delete -r -y /vol1", 0,
                                    out_is("Volume vol1 is deleted\n"))),
    # --- ACLs (ozone-shell-lib.robot "Test ozone shell" ACL steps; AclOption's output) ---
    ("acl-volume-create", row("volume create /aclvol", 0, empty)),
    ("acl-volume-getacl", row("volume getacl /aclvol", 0, has_acl("USER", ME, "ACCESS", "ALL"))),
    ("acl-volume-addacl", row("volume addacl /aclvol -a user:superuser1:rwxy[DEFAULT]", 0,
                              out_is("ACL USER:superuser1:rwxy[DEFAULT] added successfully.\n"))),
    ("acl-volume-addacl-again", row("volume addacl /aclvol --acl user:superuser1:r[DEFAULT]", 0,
                                    out_is("ACL USER:superuser1:r[DEFAULT] already exists.\n"))),
    ("acl-volume-getacl-default", row("volume getacl /aclvol", 0, has_acl(
        "USER", "superuser1", "DEFAULT", "READ", "WRITE", "READ_ACL", "WRITE_ACL"))),
    ("acl-volume-removeacl-access", row("volume removeacl /aclvol -a user:superuser1:xy", 0,
                                        out_is("ACL USER:superuser1:xy[ACCESS] doesn't exist.\n"))),
    ("acl-volume-removeacl", row(
        "volume removeacl /aclvol --acls user:superuser1:xy[DEFAULT]", 0,
        out_is("ACL USER:superuser1:xy[DEFAULT] removed successfully.\n"))),
    ("acl-volume-setacl", row("volume setacl /aclvol -al user:superuser1:rwxy[DEFAULT],"
                              "group:superuser1:a,user:testuser:rwxyc,group:superuser1:a[DEFAULT]",
                              0, out_is("ACLs set successfully.\n"))),
    ("acl-volume-getacl-text", row("volume getacl /aclvol --no-json", 0, out_is(
        "USER:superuser1:rwxy[DEFAULT],GROUP:superuser1:a,USER:testuser:rwcxy,"
        "GROUP:superuser1:a[DEFAULT]\n"))),
    ("acl-volume-info", row("volume info /aclvol", 0, volume_info(name="aclvol"))),
    ("acl-bucket-create", row("bucket create /aclvol/bb1", 0, empty)),
    ("acl-bucket-getacl", row("bucket getacl /aclvol/bb1", 0,
                              has_acl("USER", "superuser1", "ACCESS", "READ", "WRITE"))),
    ("acl-bucket-inherited", row("bucket getacl /aclvol/bb1 --json=false", 0, out_is(
        f"USER:{ME}:a,USER:superuser1:rwxy,GROUP:superuser1:a\n"))),
    ("acl-bucket-addacl-inherited", row(
        "bucket addacl /aclvol/bb1 -a user:superuser1:rwxy", 0,
        out_is("ACL USER:superuser1:rwxy[ACCESS] already exists.\n"))),
    ("acl-bucket-addacl-default", row("bucket addacl /aclvol/bb1 -a group:dev:rl[DEFAULT]", 0,
                                      out_is("ACL GROUP:dev:rl[DEFAULT] added successfully.\n"))),
    ("acl-key-put", row("key put /aclvol/bb1/key2 --size 10", 0, empty)),
    ("acl-key-getacl-inherited", row("key getacl /aclvol/bb1/key2 --json=false", 0,
                                     out_is(f"USER:{ME}:a,GROUP:dev:rl\n"))),
    ("acl-key-addacl", row("key addacl /aclvol/bb1/key2 -a user:superuser1:rwxy", 0,
                           out_is("ACL USER:superuser1:rwxy[ACCESS] added successfully.\n"))),
    ("acl-key-removeacl", row("key removeacl /aclvol/bb1/key2 -a user:superuser1:xy", 0,
                              out_is("ACL USER:superuser1:xy[ACCESS] removed successfully.\n"))),
    ("acl-key-setacl", row("key setacl /aclvol/bb1/key2 -a user:superuser1:rwxy,"
                           "group:superuser1:a -a user:testuser:rwxyc", 0,
                           out_is("ACLs set successfully.\n"))),
    ("acl-key-getacl", row("key getacl --json /aclvol/bb1/key2", 0,
                           has_acl("USER", "testuser", "ACCESS", "CREATE", "WRITE_ACL"))),
    ("acl-malformed", row("key addacl /aclvol/bb1/key2 -a user:superuser1:rq", USAGE,
                          err_has("[q] ACL right is not recognized"))),
    ("acl-malformed-in-a-list", row("key setacl /aclvol/bb1/key2 -a user:a:r,user::r", USAGE,
                                    err_has("a user ACL needs a name"))),
    ("acl-unchanged", row("key getacl /aclvol/bb1/key2 --no-json", 0, out_is(
        "USER:superuser1:rwxy,GROUP:superuser1:a,USER:testuser:rwcxy\n"))),
    ("acl-no-option", row("key addacl /aclvol/bb1/key2", USAGE, err_has("--acls"))),
    ("acl-missing-key", row("key addacl /aclvol/bb1/nokey -a user:a:r", FAILED,
                            err_starts("KEY_NOT_FOUND "))),
    ("acl-volume-address", row("volume getacl /aclvol/bb1", USAGE,
                               err_has("Delimiters (/) not allowed in volume name"))),
    ("acl-prefix", row("prefix addacl /aclvol/bb1/prefix1/ -a user:user1:rwxy", FAILED,
                       err_has("not supported: prefix ACLs"))),
    ("acl-s3-store", row("volume getacl --store S3 /aclvol", FAILED,
                         err_has("not supported: --store S3"))),
    ("acl-volume-delete", row("volume delete -r -y /aclvol", 0,
                              out_is("Volume aclvol is deleted\n"))),
    # --- list flags (ListPaginationOptions, PrefixFilterOption, ListLimitOptions) ---
    ("key-list-default-100", row("key list /lst/bk1", 0, names_count(100, "k000", "k099",
                                                                    more=True))),
    ("key-list-all", row("key list /lst/bk1 --all", 0, names_count(120, "k000", "k119"))),
    ("key-list-length", row("key list /lst/bk1 --length 10", 0,
                            names_count(10, "k000", "k009", more=True))),
    ("key-list-start", row("key list /lst/bk1 -l 10 --start k009", 0,
                           names_count(10, "k010", "k019", more=True))),
    ("key-list-start-tail", row("key list /lst/bk1 -s k115", 0,
                                names_count(4, "k116", "k119"))),
    ("key-list-prefix", row("key list /lst/bk1 --prefix k10", 0, names_count(10, "k100", "k109"))),
    ("key-list-prefix-start", row("key list /lst/bk1 -p k10 -s k105", 0,
                                  names_count(4, "k106", "k109"))),
    ("key-list-start-all", row("key list /lst/bk1 -a -s k050", 0, names_count(69, "k051",
                                                                             "k119"))),
    ("key-list-zero-length", row("key list /lst/bk1 -l 0", FAILED,
                                 err_has("List length should be a positive number"))),
    ("key-list-length-and-all", row("key list /lst/bk1 -l 5 -a", USAGE)),
    ("key-list-empty", row("key list /lst/bk3", 0, out_is("[ ]\n"))),
    ("key-list-missing-bucket", row("key list /lst/nope", FAILED, err_starts("BUCKET_NOT_FOUND "))),
    ("key-list-volume", row("key list /lst -l 101", 0, arrays_per_bucket(101))),
    ("key-list-volume-all", row("key list /lst --all", 0, arrays_per_bucket(120, 1, 0, 0, 0))),
    ("key-list-volume-prefix", row("key list /lst/ -p k000", 0, arrays_per_bucket(1, 1, 0, 0, 0))),
    ("bucket-list-all", row("bucket list /lst", 0,
                            listed(BUCKET_FIELDS, ["bk1", "bk2", "bk3", "bk4", "bk5"]))),
    ("bucket-list-start", row("bucket list /lst --start bk2", 0,
                              listed(BUCKET_FIELDS, ["bk3", "bk4", "bk5"]))),
    ("bucket-list-length", row("bucket ls /lst -l 2", 0, listed(BUCKET_FIELDS, ["bk1", "bk2"]))),
    ("bucket-list-prefix", row("bucket list /lst -p bk4", 0, listed(BUCKET_FIELDS, ["bk4"]))),
    ("bucket-list-bad-length", row("bucket list /lst -l -1", FAILED,
                                   err_has("List length should be a positive number"))),
    ("bucket-list-missing-volume", row("bucket list /nope", FAILED,
                                       err_starts("VOLUME_NOT_FOUND "))),
    ("volume-list-prefix", row("volume list --prefix ls", 0, listed(VOLUME_FIELDS, ["lst"]))),
    ("volume-list-start", row("volume list -a -s lst", 0,
                              volume_names("other", absent=("lst",)))),
    ("volume-list-all", row("volume list --all", 0, volume_names("lst", "other", "volu"))),
    ("volume-list-not-root", row("volume list /lst", USAGE,
                                 err_has("Volume/bucket/key elements should not been used"))),
]


@pytest.mark.parametrize(("name", "case"), TABLE, ids=[name for name, _ in TABLE])
def test_command(shell: Shell, name: str, case: Row) -> None:
    args = [arg.format(files=shell.files) for arg in case.args]
    result = shell(*args)
    assert result.code == case.code, f"{name}: exit {result.code}\n{result.out}\n{result.err}"
    if case.check is not None:
        case.check(result, shell)


def test_o3_uri_names_the_om(shell: Shell) -> None:
    """An o3://host:port URI picks the OM, as Ozone's does; --om is then unused."""
    dead = Shell(f"127.0.0.1:{free_port()}", shell.files)
    result = dead("--timeout", "5", "volume", "info", f"o3://{shell.address}/lst")
    assert result.code == 0, result.err
    assert result.json()["name"] == "lst"


def test_recursive_delete_asks_first(shell: Shell, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --yes, -r asks; anything but 'yes' cancels."""
    assert shell("bucket", "create", "/lst/gone").code == 0
    monkeypatch.setattr("sys.stdin", io.StringIO("no\n"))
    result = shell("bucket", "delete", "-r", "/lst/gone")
    assert result.code == 0
    assert result.out.endswith("Operation cancelled.\n")
    monkeypatch.setattr("sys.stdin", io.StringIO("yes\n"))
    assert shell("bucket", "delete", "-r", "/lst/gone").out.endswith("Bucket gone is deleted\n")


def test_process_exit_codes(shell: Shell) -> None:
    """The real process exits 255 on a failed command and 2 on a usage error, as Ozone's."""
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(om_command("sh", "--om", shell.address, *args), cwd=REPO,
                              capture_output=True, text=True, timeout=60, check=False)
    failed = run("key", "info", "/lst/bk1/none")
    assert (failed.returncode, failed.stderr.split(" ")[0]) == (FAILED, "KEY_NOT_FOUND")
    assert run("key", "info", "/lst").returncode == USAGE
