"""``om sh``'s pure parts: Ozone's JSON layout, instants, addresses, quotas, list limits."""

from __future__ import annotations

import pytest

from om.cli.sh.address import Address, AddressError, parse_address
from om.cli.sh.options import ShellError, list_limit, parse_namespace_quota, parse_space_quota
from om.cli.sh.ozone_json import (
    bucket_json,
    iso_instant,
    key_json,
    pretty,
    volume_json,
)
from om.protocol import acls, om_pb2


class TestPretty:
    """Jackson's DefaultPrettyPrinter, which ``ozone sh`` prints through."""

    def test_object_fields_and_empty_containers(self) -> None:
        assert pretty({"metadata": {}, "name": "v", "n": 1, "ok": False, "l": []}) == (
            '{\n  "metadata" : { },\n  "name" : "v",\n  "n" : 1,\n  "ok" : false,\n'
            '  "l" : [ ]\n}')

    def test_list_of_objects_stays_on_the_bracket_lines(self) -> None:
        assert pretty([{"a": 1}, {"a": 2}]) == '[ {\n  "a" : 1\n}, {\n  "a" : 2\n} ]'

    def test_nesting_counts_objects_only(self) -> None:
        text = pretty({"acls": [{"type": "USER", "aclList": ["ALL"]}]})
        assert text == ('{\n  "acls" : [ {\n    "type" : "USER",\n    "aclList" : [ "ALL" ]\n'
                        '  } ]\n}')

    def test_empty_list_and_unicode(self) -> None:
        assert pretty([]) == "[ ]"
        assert pretty({"k": "ünï"}) == '{\n  "k" : "ünï"\n}'


class TestIsoInstant:
    """java.time.Instant through Jackson's JavaTimeModule: ISO-8601, UTC, 'Z'."""

    @pytest.mark.parametrize(("ms", "text"), [
        (0, "1970-01-01T00:00:00Z"),
        (1_672_913_472_345, "2023-01-05T10:11:12.345Z"),
        (1_672_913_472_040, "2023-01-05T10:11:12.040Z"),
        (1_672_913_472_000, "2023-01-05T10:11:12Z"),
    ])
    def test_formats(self, ms: int, text: str) -> None:
        assert iso_instant(ms) == text


class TestInfoShapes:
    """Field names, order and JSON types of OzoneVolume, OzoneBucket and OzoneKey."""

    def test_volume(self) -> None:
        info = om_pb2.VolumeInfo(volume="v", admin_name="a", owner_name="o", quota_in_bytes=-1,
                                 quota_in_namespace=5, used_namespace=2,
                                 creation_time=1_000, modification_time=2_000,
                                 acls=[acls.parse("group:g:rw[DEFAULT]").to_proto()])
        assert volume_json(info) == {
            "metadata": {}, "name": "v", "admin": "a", "owner": "o", "quotaInBytes": -1,
            "quotaInNamespace": 5, "usedNamespace": 2,
            "creationTime": "1970-01-01T00:00:01Z", "modificationTime": "1970-01-01T00:00:02Z",
            "acls": [{"type": "GROUP", "name": "g", "aclScope": "DEFAULT",
                      "aclList": ["READ", "WRITE"]}],
            "refCount": 0}

    def test_bucket(self) -> None:
        info = om_pb2.BucketInfo(volume_name="v", bucket_name="b", owner="o",
                                 quota_in_bytes=1024, quota_in_namespace=-1, used_bytes=300,
                                 used_namespace=1, creation_time=5, modification_time=5,
                                 layout="OBJECT_STORE")
        data = bucket_json(info)
        assert list(data) == [
            "metadata", "volumeName", "name", "storageType", "versioning", "usedBytes",
            "usedNamespace", "creationTime", "modificationTime", "sourcePathExist",
            "quotaInBytes", "quotaInNamespace", "bucketLayout", "owner", "pendingDeleteBytes",
            "pendingDeleteNamespace", "link"]
        assert data["usedBytes"] == 300
        assert data["bucketLayout"] == "OBJECT_STORE"
        assert data["link"] is False
        assert data["creationTime"] == "1970-01-01T00:00:00.005Z"

    def test_bucket_without_layout_is_object_store(self) -> None:
        assert bucket_json(om_pb2.BucketInfo())["bucketLayout"] == "OBJECT_STORE"

    def test_key_list_entry_and_details(self) -> None:
        info = om_pb2.KeyInfo(volume_name="v", bucket_name="b", key_name="k", data_size=7,
                              replication_factor=1, creation_time=1, modification_time=1,
                              update_id=42)
        entry = key_json(info)
        assert list(entry) == ["volumeName", "bucketName", "name", "dataSize", "creationTime",
                               "modificationTime", "replicationConfig", "metadata", "tags",
                               "file"]
        assert entry["replicationConfig"] == {"replicationFactor": "ONE", "requiredNodes": 1,
                                              "minimumNodes": 1, "replicationType": "RATIS"}
        details = key_json(info, details=True)
        assert list(details)[-3:] == ["ozoneKeyLocations", "generation", "file"]
        assert details["ozoneKeyLocations"] == []
        assert details["generation"] == 42


class TestAddress:
    """Ozone's OzoneAddress: optional scheme and host, leading slashes, trailing slashes."""

    @pytest.mark.parametrize(("text", "parts"), [
        ("/vol1", ("vol1", "", "")),
        ("vol1", ("vol1", "", "")),
        ("/vol1/", ("vol1", "", "")),
        ("///vol1/bucket1/", ("vol1", "bucket1", "")),
        ("//om.example:1/vol1", ("vol1", "", "")),
        ("/vol1/bucket1/dir/key", ("vol1", "bucket1", "dir/key")),
        ("/vol1/bucket1/dir/", ("vol1", "bucket1", "dir/")),
        ("o3:///vol1/bucket1", ("vol1", "bucket1", "")),
        ("o3://om.example:9862/vol1", ("vol1", "", "")),
        ("", ("", "", "")),
        ("/", ("", "", "")),
    ])
    def test_parts(self, text: str, parts: tuple[str, str, str]) -> None:
        address = parse_address(text)
        assert (address.volume, address.bucket, address.key) == parts

    def test_host_and_port(self) -> None:
        assert parse_address("o3://om.example:9999/vol1").om_address == "om.example:9999"
        assert parse_address("o3://om.example/vol1").om_address == "om.example:9862"
        assert parse_address("/vol1").om_address is None

    def test_unknown_scheme(self) -> None:
        with pytest.raises(AddressError, match="unknown protocol scheme: http"):
            parse_address("http://host/vol1")

    @pytest.mark.parametrize(("text", "kind", "message"), [
        ("/vol1/bucket1", "volume", "Delimiters (/) not allowed in volume name"),
        ("/", "volume", "Volume name is required"),
        ("/vol1/bucket1/key", "bucket", "Delimiters (/) not allowed in bucket name"),
        ("/vol1//", "bucket", "Bucket name is required"),
        ("/vol1", "bucket", "Bucket name is required"),
        ("/vol1/bucket1", "key", "Key name is missing"),
        ("/vol1", "root", "Volume/bucket/key elements should not been used"),
        ("/vol1/b/k", "volume_or_bucket", "Key address is not supported"),
    ])
    def test_refusals(self, text: str, kind: str, message: str) -> None:
        with pytest.raises(AddressError, match=message.replace("(", r"\(").replace(")", r"\)")):
            parse_address(text).require(kind)

    def test_accepts(self) -> None:
        assert parse_address("/vol1/bucket1/").require("bucket") == Address(
            "vol1", "bucket1", "", None)
        assert parse_address("/vol1/").require("volume_or_bucket").volume == "vol1"


class TestOptions:
    """Ozone's OzoneQuota parsing and ListLimitOptions."""

    @pytest.mark.parametrize(("text", "value"), [
        ("1024", 1024), ("10TB", 10 << 40), ("1 gb", 1 << 30), ("2KB", 2048), ("5B", 5),
        ("1EB", 1 << 60),
    ])
    def test_space_quota(self, text: str, value: int) -> None:
        assert parse_space_quota(text) == value

    @pytest.mark.parametrize(("text", "message"), [
        ("1.5GB", "1.5GB is invalid. The quota value should be a positive integer"),
        ("10G", "10G is invalid"),
        ("0", "Invalid value for space quota: 0"),
        ("-3MB", "Invalid value for space quota: -3"),
    ])
    def test_space_quota_refusals(self, text: str, message: str) -> None:
        with pytest.raises(ShellError, match=message.replace(".", r"\.")):
            parse_space_quota(text)

    def test_namespace_quota(self) -> None:
        assert parse_namespace_quota("100") == 100
        with pytest.raises(ShellError, match=r"1\.5 is invalid"):
            parse_namespace_quota("1.5")
        with pytest.raises(ShellError, match="Invalid value for namespace quota: 0"):
            parse_namespace_quota("0")

    def test_list_limit(self) -> None:
        assert list_limit(100, all_items=False) == 100
        assert list_limit(100, all_items=True) is None
        with pytest.raises(ShellError, match="List length should be a positive number"):
            list_limit(0, all_items=False)
