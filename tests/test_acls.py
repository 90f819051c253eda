"""Ozone's native ACLs: the entries, the ACL requests, inheritance and enforcement.

The enforcement table (``TestEachRightIsEnforced``) is the spec: for every
request type, the rights Ozone's requests ask for in ``preExecute`` and the
parent rights its ``OzoneNativeAuthorizer`` / ``OzoneAclUtils.checkAllAcls``
add (a key's bucket WRITE for CREATE and WRITE, else READ, and its volume
READ; a bucket's volume WRITE for CREATE, else READ). Each row runs on a real
store through the gatekeeper's ``authorize`` and the handlers: with exactly
the rights it lists the request is allowed; with every right but one of them
on that object it is refused, PERMISSION_DENIED naming the user, the right and
the object as Ozone words it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from om.client import requests as build
from om.config import ConfigError, load
from om.executor.errors import OMError
from om.executor.registry import KINDS
from om.gatekeeper.authorize import AclPolicy, acl_policy, authorize, needs_of
from om.gatekeeper.lock_plan import Level, Mode, plan_locks
from om.node.parts import leader_config
from om.protocol import acls, om_pb2
from om.statemachine.store import Store
from tests.handler_harness import LEADER, OLD, Harness, status_name
from tests.leader_harness import LeaderUnderTest, config

V, B, K = "vol1", "bucket1", "k"
ADMIN, CAROL = "admin", "carol"
POLICY = AclPolicy(acl_enabled=True, admins=frozenset({ADMIN}))
BASIC = "rwcldxy"     # every right but ALL and NONE


def acl(text: str) -> om_pb2.OzoneAcl:
    return acls.parse(text).to_proto()


def entries(row: om_pb2.VolumeInfo | om_pb2.BucketInfo | om_pb2.KeyInfo | None) -> list[str]:
    assert row is not None
    return [str(acls.from_proto(entry)) for entry in row.acls]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    db = Store(tmp_path_factory.mktemp("acls") / "db")
    yield db
    db.close()


@pytest.fixture(params=[LEADER, OLD])
def om(store: Store, request: pytest.FixtureRequest) -> Iterator[Harness]:
    """An empty store, once per execution flow."""
    harness = Harness(store, flow=request.param)
    yield harness
    harness.close()


@pytest.fixture
def lo(store: Store) -> Iterator[Harness]:
    """An empty store, leader flow only (authorization runs on the leader)."""
    harness = Harness(store)
    yield harness
    harness.close()


def run_as(h: Harness, user: str, request: om_pb2.OMRequest,
           policy: AclPolicy = POLICY) -> om_pb2.OMResponse:
    """What the leader does: authorize, then execute (a denial is a response too)."""
    request.user = user
    try:
        authorize(request, h.store, policy)
    except OMError as error:
        return om_pb2.OMResponse(status=error.status, message=error.message)
    return h.run(request, user=user)


# ================================================================== entries ===

class TestEntries:
    @pytest.mark.parametrize(("text", "shown"), [
        ("user:bob:rw", "USER:bob:rw[ACCESS]"),
        ("group:dev:rwxy[DEFAULT]", "GROUP:dev:rwxy[DEFAULT]"),
        ("USER:bob:yxdlcwr", "USER:bob:rwcldxy[ACCESS]"),   # letters in Ozone's bit order
        ("world::r", "WORLD:WORLD:r[ACCESS]"),
        ("anonymous:ANONYMOUS:an", "ANONYMOUS:ANONYMOUS:an[ACCESS]"),
        (" user:bob:a ", "USER:bob:a[ACCESS]"),
    ])
    def test_text_form_is_ozones(self, text: str, shown: str) -> None:
        parsed = acls.parse(text)
        assert str(parsed) == shown
        assert acls.from_proto(parsed.to_proto()) == parsed

    @pytest.mark.parametrize(("text", "reason"), [
        ("", "use type:name:rights[SCOPE]"),
        ("user:bob", "use type:name:rights[SCOPE]"),
        ("user:bob:r:extra", "use type:name:rights[SCOPE]"),
        ("role:bob:r", "unknown type 'role'"),
        ("client_ip:1.2.3.4:r", "unknown type 'client_ip'"),
        ("user::r", "a user ACL needs a name"),
        ("user:bob:", "at least one right"),
        ("user:bob:[DEFAULT]", "at least one right"),
        ("user:bob:rq", "[q] ACL right is not recognized"),
        ("user:bob:r[default]", "[[] ACL right is not recognized"),
        ("world:bob:r", "a world ACL takes no name"),
    ])
    def test_malformed_text_says_why(self, text: str, reason: str) -> None:
        with pytest.raises(acls.AclError, match="invalid ACL") as raised:
            acls.parse(text)
        assert reason in str(raised.value)

    def test_a_list_splits_on_commas(self) -> None:
        parsed = acls.parse_list(["user:a:r,group:g:w[DEFAULT]", "world::l"])
        assert [str(p) for p in parsed] == ["USER:a:r[ACCESS]", "GROUP:g:w[DEFAULT]",
                                            "WORLD:WORLD:l[ACCESS]"]

    @pytest.mark.parametrize(("letters", "granted"), [
        ("r", {"READ"}), ("a", set(om_pb2.OzoneAcl.Right.keys()) - {"NONE"}),
        ("rn", set()), ("an", set()), ("xy", {"READ_ACL", "WRITE_ACL"}),
    ])
    def test_all_grants_everything_and_none_grants_nothing(self, letters: str,
                                                           granted: set[str]) -> None:
        entry = acls.parse(f"user:bob:{letters}")
        assert {name for name, right in om_pb2.OzoneAcl.Right.items()
                if right != acls.NONE and entry.grants(right)} == granted

    def test_add_ors_rights_into_the_same_entry_and_moves_it_last(self) -> None:
        start = acls.parse_list(["user:a:r,group:g:r,user:a:r[DEFAULT]"])
        added, changed = acls.add(start, acls.parse("user:a:w"))
        assert changed
        assert [str(a) for a in added] == ["GROUP:g:r[ACCESS]", "USER:a:r[DEFAULT]",
                                           "USER:a:rw[ACCESS]"]
        again, changed = acls.add(added, acls.parse("user:a:r"))
        assert not changed
        assert again == added

    def test_remove_clears_rights_and_drops_an_empty_entry(self) -> None:
        start = acls.parse_list(["user:a:rw,group:g:r"])
        left, changed = acls.remove(start, acls.parse("user:a:w"))
        assert changed
        assert [str(a) for a in left] == ["GROUP:g:r[ACCESS]", "USER:a:r[ACCESS]"]
        gone, changed = acls.remove(left, acls.parse("group:g:rw"))
        assert changed
        assert [str(a) for a in gone] == ["USER:a:r[ACCESS]"]
        same, changed = acls.remove(gone, acls.parse("user:a:r[DEFAULT]"))
        assert not changed
        assert same == gone


# ============================================================= ACL requests ===

def key_obj(key: str = K) -> om_pb2.OzoneObj:
    return build.acl_object(V, B, key)


def setup(h: Harness) -> None:
    h.create_volume(V)
    h.create_bucket(V, B)
    h.put_key(V, B, K)


class TestAclRequests:
    @pytest.mark.parametrize("obj", [build.acl_object(V), build.acl_object(V, B), key_obj()],
                             ids=["volume", "bucket", "key"])
    def test_add_remove_set_get(self, om: Harness, obj: om_pb2.OzoneObj) -> None:
        setup(om)
        add = om.ok(build.add_acl(obj, acl("user:bob:rw[DEFAULT]")), user=ADMIN)
        assert add.add_acl.response
        assert not om.ok(build.add_acl(obj, acl("user:bob:r[DEFAULT]"))).add_acl.response
        got = om.ok(build.get_acl(obj)).get_acl.acls
        assert [str(acls.from_proto(a)) for a in got] == ["USER:alice:a[ACCESS]",
                                                           "USER:bob:rw[DEFAULT]"]
        assert om.ok(build.remove_acl(obj, acl("user:bob:w[DEFAULT]"))).remove_acl.response
        assert not om.ok(build.remove_acl(obj, acl("user:nobody:w"))).remove_acl.response
        om.ok(build.set_acl(obj, [acl("group:dev:rl"), acl("group:dev:x"), acl("world::r")]))
        got = om.ok(build.get_acl(obj)).get_acl.acls
        assert [str(acls.from_proto(a)) for a in got] == ["GROUP:dev:rlx[ACCESS]",
                                                           "WORLD:WORLD:r[ACCESS]"]

    def test_a_change_stamps_the_row_and_a_no_op_leaves_it_as_it_was(self, om: Harness) -> None:
        setup(om)
        om.clock.advance(1000)
        om.ok(build.add_acl(build.acl_object(V, B), acl("user:bob:r")))
        row = om.bucket_row(V, B)
        assert row is not None
        assert (row.modification_time, row.update_id) == (om.clock.now_ms, om.managed_index)
        before = om.data_digests()
        om.clock.advance(1000)
        response = om.ok(build.add_acl(build.acl_object(V, B), acl("user:bob:r")))
        assert not response.add_acl.response
        assert om.data_digests() == before

    @pytest.mark.parametrize("entry", [
        om_pb2.OzoneAcl(type=om_pb2.OzoneAcl.USER, name="bob"),                 # no rights
        om_pb2.OzoneAcl(type=om_pb2.OzoneAcl.USER, rights=[acls.READ]),         # no name
        om_pb2.OzoneAcl(name="bob", rights=[acls.READ]),                        # no type
        om_pb2.OzoneAcl(type=om_pb2.OzoneAcl.USER, name="bo:b", rights=[acls.READ]),
        om_pb2.OzoneAcl(type=om_pb2.OzoneAcl.USER, name="bob",
                        rights=[om_pb2.OzoneAcl.Right.ValueType(12)]),
        om_pb2.OzoneAcl(type=om_pb2.OzoneAcl.WORLD, name="bob", rights=[acls.READ]),
    ], ids=["no-rights", "no-name", "no-type", "colon", "unknown-right", "named-world"])
    def test_a_malformed_entry_is_refused_and_writes_nothing(self, om: Harness,
                                                             entry: om_pb2.OzoneAcl) -> None:
        setup(om)
        for request in (build.add_acl(key_obj(), entry), build.remove_acl(key_obj(), entry),
                        build.set_acl(key_obj(), [acl("user:ok:r"), entry])):
            before = om.data_digests()
            response = om.run(request)
            assert status_name(response) == "INVALID_REQUEST"
            field = request.WhichOneof("body")
            assert response.message.startswith(f"{field}.acl: "), response.message
            assert "invalid ACL: " in response.message
            assert om.data_digests() == before

    @pytest.mark.parametrize(("obj", "status"), [
        (om_pb2.OzoneObj(volume=V), "INVALID_REQUEST"),
        (om_pb2.OzoneObj(res_type=om_pb2.OzoneObj.BUCKET, volume=V), "INVALID_REQUEST"),
        (om_pb2.OzoneObj(res_type=om_pb2.OzoneObj.VOLUME, volume=V, key=K), "INVALID_REQUEST"),
        (om_pb2.OzoneObj(res_type=om_pb2.OzoneObj.PREFIX, volume=V, bucket=B, key="p/"),
         "NOT_SUPPORTED_OPERATION"),
        (build.acl_object("nope"), "VOLUME_NOT_FOUND"),
        (build.acl_object(V, "nope"), "BUCKET_NOT_FOUND"),
        (build.acl_object(V, B, "nope"), "KEY_NOT_FOUND"),
    ], ids=["untyped", "bucket-without-name", "volume-with-key", "prefix", "no-volume",
            "no-bucket", "no-key"])
    def test_bad_objects(self, om: Harness, obj: om_pb2.OzoneObj, status: str) -> None:
        setup(om)
        before = om.data_digests()
        assert status_name(om.run(build.add_acl(obj, acl("user:bob:r")))) == status
        assert status_name(om.run(build.get_acl(obj))) == status
        assert om.data_digests() == before

    def test_acl_writes_take_the_locks_of_a_property_change(self) -> None:
        def plan(obj: om_pb2.OzoneObj) -> list[tuple[Level, str, Mode]]:
            return [(lock.level, lock.name, lock.mode)
                    for lock in plan_locks(build.add_acl(obj, acl("user:b:r")))]
        assert plan(build.acl_object(V)) == [(Level.VOLUME, V, Mode.WRITE)]
        assert plan(build.acl_object(V, B)) == [(Level.VOLUME, V, Mode.READ),
                                                (Level.BUCKET, f"{V}/{B}", Mode.WRITE)]
        assert plan(key_obj()) == [(Level.BUCKET, f"{V}/{B}", Mode.READ),
                                   (Level.KEY, f"{V}/{B}/{K}", Mode.WRITE)]
        assert plan_locks(build.get_acl(key_obj())) == ()


# ============================================================== inheritance ===

class TestDefaultAcls:
    def test_new_objects_get_the_creators_defaults(self, om: Harness) -> None:
        om.ok(build.create_volume(V, owner="olga"), user=ADMIN)
        om.ok(build.create_bucket(V, B, owner="otto"), user="bert")
        session = om.ok(build.create_key(V, B, K), user="kate").create_key.client_session_id
        assert entries(om.volume_row(V)) == ["USER:olga:a[ACCESS]"]     # the owner's
        assert entries(om.bucket_row(V, B)) == ["USER:bert:a[ACCESS]"]  # the creator's
        assert entries(om.open_key_row(V, B, K, session)) == ["USER:kate:a[ACCESS]"]
        om.ok(build.commit_key(V, B, K, session, 0), user="kate")
        assert entries(om.key_row(V, B, K)) == ["USER:kate:a[ACCESS]"]

    def test_volume_default_reaches_new_buckets_and_bucket_default_new_keys(
            self, om: Harness) -> None:
        om.create_volume(V)
        om.ok(build.add_acl(build.acl_object(V), acl("user:vd:rw[DEFAULT]")))
        om.ok(build.add_acl(build.acl_object(V), acl("group:vg:l[DEFAULT]")))
        om.create_bucket(V, B)
        assert entries(om.bucket_row(V, B)) == ["USER:alice:a[ACCESS]", "USER:vd:rw[ACCESS]",
                                                "GROUP:vg:l[ACCESS]"]
        om.ok(build.add_acl(build.acl_object(V, B), acl("user:bd:x[DEFAULT]")))
        om.ok(build.add_acl(build.acl_object(V, B), acl("user:alice:r[DEFAULT]")))
        key = om.put_key(V, B, K)
        # Only the bucket's DEFAULT entries, as ACCESS ones (the volume's reach keys only
        # through buckets created after them); alice's ORs into her own entry, which
        # changes its bits (ALL|READ) and so moves it last, as Ozone's addAcl does.
        expected = ["USER:bd:x[ACCESS]", "USER:alice:ra[ACCESS]"]
        assert [str(acls.from_proto(a)) for a in key.acls] == expected
        assert entries(om.key_row(V, B, K)) == expected

    @pytest.mark.parametrize("kind", ["volume", "bucket", "key"])
    def test_an_anonymous_request_creates_nothing(self, om: Harness, kind: str) -> None:
        """No user (only an insecure cluster lets one through) is PERMISSION_DENIED,
        not an internal error from an entry without a name; nothing is written."""
        om.create_volume(V)
        om.create_bucket(V, B)
        request = {"volume": build.create_volume("anon"),
                   "bucket": build.create_bucket(V, "anon"),
                   "key": build.create_key(V, B, "anon")}[kind]
        response = om.run(request, user="")
        assert status_name(response) == "PERMISSION_DENIED"
        assert "anonymous" in response.message
        assert om.volume_row("anon") is None
        assert om.bucket_row(V, "anon") is None
        assert not om.bucket_row(V, B).used_namespace   # type: ignore[union-attr]

    def test_an_existing_child_keeps_its_acls(self, om: Harness) -> None:
        setup(om)
        om.ok(build.add_acl(build.acl_object(V, B), acl("user:late:r[DEFAULT]")))
        assert entries(om.key_row(V, B, K)) == ["USER:alice:a[ACCESS]"]
        renamed = om.ok(build.rename_key(V, B, K, "k2")).rename_key.key_info
        assert [str(acls.from_proto(a)) for a in renamed.acls] == ["USER:alice:a[ACCESS]"]

    async def test_the_primary_group_gets_read_and_list(self, tmp_path: Path) -> None:
        groups = {"alice": ("dev", "ops")}
        leader = LeaderUnderTest(tmp_path / "db", config(acl=AclPolicy(groups=groups)))
        await leader.start()
        try:
            await leader.ok(build.create_volume(V))
            await leader.ok(build.create_bucket(V, B))
            bucket = leader.bucket(V, B)
            assert entries(bucket) == ["USER:alice:a[ACCESS]", "GROUP:dev:rl[ACCESS]"]
        finally:
            await leader.close()


# ============================================================== enforcement ===

Grants = dict[str, str]   # "volume" / "bucket" / "key" / "open" -> letters carol holds


@dataclass(frozen=True)
class Rule:
    """A request, the rights carol needs for it (on each object), and for each of them
    the denial Ozone gives without it ("RIGHT RESOURCE" and the object's names)."""

    request: Callable[[int], om_pb2.OMRequest]   # given CommitKey's open session
    grants: Grants
    denials: dict[tuple[str, str], str]


def _names(key: str = "") -> str:
    return f"Volume:{V} Bucket:{B}" + (f" Key:{key}" if key else "")


VOL, BKT = f"Volume:{V}", _names()
RULES: dict[str, Rule] = {
    "InfoVolume": Rule(lambda _: build.info_volume(V), {"volume": "r"},
                       {("volume", "r"): f"READ VOLUME {VOL}"}),
    "ListBuckets": Rule(lambda _: build.list_buckets(V), {"volume": "l"},
                        {("volume", "l"): f"LIST VOLUME {VOL}"}),
    "SetVolumeProperty-quota": Rule(lambda _: build.set_volume_property(V, quota_in_bytes=1 << 40),
                                    {"volume": "w"}, {("volume", "w"): f"WRITE VOLUME {VOL}"}),
    "SetVolumeProperty-owner": Rule(lambda _: build.set_volume_property(V, owner=CAROL),
                                    {"volume": "y"}, {("volume", "y"): f"WRITE_ACL VOLUME {VOL}"}),
    "DeleteVolume": Rule(lambda _: build.delete_volume(V), {"volume": "d"},
                         {("volume", "d"): f"DELETE VOLUME {VOL}"}),
    "CreateBucket": Rule(lambda _: build.create_bucket(V, "bucket2"), {"volume": "w"},
                         {("volume", "w"): f"WRITE VOLUME Volume:{V} Bucket:bucket2"}),
    "InfoBucket": Rule(lambda _: build.info_bucket(V, B), {"volume": "r", "bucket": "r"},
                       {("volume", "r"): f"READ VOLUME {BKT}",
                        ("bucket", "r"): f"READ BUCKET {BKT}"}),
    "ListKeys": Rule(lambda _: build.list_keys(V, B), {"volume": "r", "bucket": "l"},
                     {("volume", "r"): f"READ VOLUME {BKT}",
                      ("bucket", "l"): f"LIST BUCKET {BKT}"}),
    "SetBucketProperty": Rule(lambda _: build.set_bucket_property(V, B, quota_in_bytes=1 << 30),
                              {"volume": "r", "bucket": "w"},
                              {("volume", "r"): f"READ VOLUME {BKT}",
                               ("bucket", "w"): f"WRITE BUCKET {BKT}"}),
    "DeleteBucket": Rule(lambda _: build.delete_bucket(V, B), {"volume": "r", "bucket": "d"},
                         {("volume", "r"): f"READ VOLUME {BKT}",
                          ("bucket", "d"): f"DELETE BUCKET {BKT}"}),
    "CreateKey": Rule(lambda _: build.create_key(V, B, "k2"), {"volume": "r", "bucket": "w"},
                      {("volume", "r"): f"READ VOLUME {_names('k2')}",
                       ("bucket", "w"): f"CREATE KEY {_names('k2')}"}),
    "CommitKey": Rule(lambda session: build.commit_key(V, B, K, session, 0),
                      {"volume": "r", "bucket": "w", "open": "w"},
                      {("volume", "r"): f"READ VOLUME {_names(K)}",
                       ("bucket", "w"): f"WRITE KEY {_names(K)}",
                       ("open", "w"): f"WRITE KEY {_names(K)}"}),
    "LookupKey": Rule(lambda _: build.lookup_key(V, B, K),
                      {"volume": "r", "bucket": "r", "key": "r"},
                      {("volume", "r"): f"READ VOLUME {_names(K)}",
                       ("bucket", "r"): f"READ KEY {_names(K)}",
                       ("key", "r"): f"READ KEY {_names(K)}"}),
    "DeleteKey": Rule(lambda _: build.delete_key(V, B, K),
                      {"volume": "r", "bucket": "r", "key": "d"},
                      {("volume", "r"): f"READ VOLUME {_names(K)}",
                       ("bucket", "r"): f"DELETE KEY {_names(K)}",
                       ("key", "d"): f"DELETE KEY {_names(K)}"}),
    "RenameKey": Rule(lambda _: build.rename_key(V, B, K, "k2"),
                      {"volume": "r", "bucket": "rw", "key": "d"},
                      {("volume", "r"): f"READ VOLUME {_names(K)}",
                       ("bucket", "r"): f"DELETE KEY {_names(K)}",
                       ("bucket", "w"): f"CREATE KEY {_names('k2')}",
                       ("key", "d"): f"DELETE KEY {_names(K)}"}),
    "InitiateMultiPartUpload": Rule(lambda _: build.initiate_multipart_upload(V, B, K),
                                    {"volume": "r", "bucket": "w"},
                                    {("volume", "r"): f"READ VOLUME {_names(K)}",
                                     ("bucket", "w"): f"WRITE KEY {_names(K)}"}),
    "ListMultipartUploads": Rule(lambda _: build.list_multipart_uploads(V, B),
                                 {"volume": "r", "bucket": "l"},
                                 {("volume", "r"): f"READ VOLUME {BKT}",
                                  ("bucket", "l"): f"LIST BUCKET {BKT}"}),
    "CreateSnapshot": Rule(lambda _: build.create_snapshot(V, B, "snap"),
                           {"volume": "r", "bucket": "w"},
                           {("volume", "r"): f"READ VOLUME {BKT}",
                            ("bucket", "w"): f"WRITE BUCKET {BKT}"}),
    "ListSnapshot": Rule(lambda _: build.list_snapshots(V, B), {"volume": "r", "bucket": "l"},
                         {("volume", "r"): f"READ VOLUME {BKT}",
                          ("bucket", "l"): f"LIST BUCKET {BKT}"}),
    "AddAcl-volume": Rule(lambda _: build.add_acl(build.acl_object(V), acl("user:x:r")),
                          {"volume": "y"}, {("volume", "y"): f"WRITE_ACL VOLUME {VOL}"}),
    "GetAcl-volume": Rule(lambda _: build.get_acl(build.acl_object(V)), {"volume": "x"},
                          {("volume", "x"): f"READ_ACL VOLUME {VOL}"}),
    "RemoveAcl-bucket": Rule(lambda _: build.remove_acl(build.acl_object(V, B), acl("user:x:r")),
                             {"volume": "r", "bucket": "y"},
                             {("volume", "r"): f"READ VOLUME {BKT}",
                              ("bucket", "y"): f"WRITE_ACL BUCKET {BKT}"}),
    "GetAcl-bucket": Rule(lambda _: build.get_acl(build.acl_object(V, B)),
                          {"volume": "r", "bucket": "x"},
                          {("volume", "r"): f"READ VOLUME {BKT}",
                           ("bucket", "x"): f"READ_ACL BUCKET {BKT}"}),
    "SetAcl-key": Rule(lambda _: build.set_acl(key_obj(), [acl("user:x:r")]),
                       {"volume": "r", "bucket": "r", "key": "y"},
                       {("volume", "r"): f"READ VOLUME {_names(K)}",
                        ("bucket", "r"): f"WRITE_ACL KEY {_names(K)}",
                        ("key", "y"): f"WRITE_ACL KEY {_names(K)}"}),
    "GetAcl-key": Rule(lambda _: build.get_acl(key_obj()),
                       {"volume": "r", "bucket": "r", "key": "x"},
                       {("volume", "r"): f"READ VOLUME {_names(K)}",
                        ("bucket", "r"): f"READ_ACL KEY {_names(K)}",
                        ("key", "x"): f"READ_ACL KEY {_names(K)}"}),
}
DENIALS = [(name, removed) for name, rule in RULES.items() for removed in rule.denials]


def _set(h: Harness, obj: om_pb2.OzoneObj, carol: str, scope: str = "") -> None:
    """The object's ACL becomes the admin's ALL plus carol's ``carol`` rights."""
    entries_ = [acl(f"user:{ADMIN}:a")]
    if carol:
        entries_.append(acl(f"user:{CAROL}:{carol}{scope}"))
    h.ok(build.set_acl(obj, entries_), user=ADMIN)


def world(h: Harness, grants: Grants) -> int:
    """vol1/bucket1/k owned by the admin, with carol holding exactly ``grants``; returns
    the session of an open key of k (the admin's) on which carol holds ``open``."""
    h.ok(build.create_volume(V), user=ADMIN)
    h.ok(build.create_bucket(V, B), user=ADMIN)
    opened = h.ok(build.create_key(V, B, K), user=ADMIN).create_key
    h.ok(build.commit_key(V, B, K, opened.client_session_id, 0), user=ADMIN)
    _set(h, build.acl_object(V, B), grants.get("open", ""), "[DEFAULT]")  # the open key's
    session = h.ok(build.create_key(V, B, K), user=ADMIN).create_key.client_session_id
    _set(h, build.acl_object(V), grants.get("volume", ""))
    _set(h, build.acl_object(V, B), grants.get("bucket", ""))
    _set(h, key_obj(), grants.get("key", ""))
    return session


class TestEachRightIsEnforced:
    def test_the_table_covers_every_request_type(self) -> None:
        covered = {om_pb2.Type.Name(rule.request(1).cmd_type) for rule in RULES.values()}
        # CreateVolume and ListVolume: the two tests after the table; the token requests
        # need no right (authentication only: tests/test_tokens.py); the certificate
        # requests are for administrators (tests/test_user_certificates.py)
        tokens = {"GetDelegationToken", "RenewDelegationToken", "CancelDelegationToken"}
        # the file-system requests: TestFileSystemBuckets (the leader's own purge steps
        # need no right: clients' are refused at the intake, tests/test_fs_cli.py)
        fs = set(FS_RULES) | {"PurgeDirectories", "PurgeKeys", "DeleteOpenKeys"}
        administrators = {"AddUserCertificate", "RevokeUserCertificates",
                          "ListUserCertificates"}
        # prepare, cancel and finalize for administrators, their status reads for anyone
        # (tests/test_upgrade.py)
        administrators |= {"Prepare", "CancelPrepare", "FinalizeUpgrade", "PrepareStatus",
                           "FinalizeUpgradeProgress"}
        # the flow switch for administrators, its status for anyone (tests/test_flow_switch.py)
        administrators |= {"SetFlows", "FlowStatus"}
        # the requests about an upload in progress: tests/test_multipart.py (WRITE on the
        # key, a part's commit on its open key; READ to list the parts); the leader's expiry
        # needs no right
        fs |= {"CommitMultiPartUpload", "CompleteMultiPartUpload", "AbortMultiPartUpload",
               "ListMultiPartUploadParts", "AbortExpiredMultiPartUploads"}
        # the requests that name an existing snapshot: tests/test_om_snapshots.py
        fs |= {"DeleteSnapshot", "GetSnapshotInfo", "SnapshotDiff"}
        assert covered | {"CreateVolume", "ListVolume"} | tokens | fs | administrators == {
            k.name for k in KINDS.values()}

    @pytest.mark.parametrize("name", list(RULES))
    def test_exactly_the_listed_rights_allow_it(self, lo: Harness, name: str) -> None:
        rule = RULES[name]
        session = world(lo, rule.grants)
        response = run_as(lo, CAROL, rule.request(session))
        assert response.status != om_pb2.PERMISSION_DENIED, response.message
        assert status_name(response) in ("OK", "VOLUME_NOT_EMPTY", "BUCKET_NOT_EMPTY")

    @pytest.mark.parametrize(("name", "removed"), DENIALS,
                             ids=[f"{n}-without-{o}-{r}" for n, (o, r) in DENIALS])
    def test_every_other_right_does_not(self, lo: Harness, name: str,
                                        removed: tuple[str, str]) -> None:
        rule = RULES[name]
        where, right = removed
        grants = dict(rule.grants)
        grants[where] = BASIC.replace(right, "")     # all but that right (and not ALL)
        session = world(lo, grants)
        before = lo.data_digests()
        response = run_as(lo, CAROL, rule.request(session))
        assert status_name(response) == "PERMISSION_DENIED"
        assert response.message == f"User {CAROL} doesn't have " + \
            rule.denials[removed].replace(" ", " permission to access ", 1)
        assert lo.data_digests() == before

    def test_only_administrators_create_volumes(self, lo: Harness) -> None:
        world(lo, {"volume": "a"})
        response = run_as(lo, CAROL, build.create_volume("vol2"))
        assert response.message == ("User carol doesn't have CREATE permission to access "
                                    "VOLUME Volume:vol2")
        assert run_as(lo, ADMIN, build.create_volume("vol2")).status == om_pb2.OK

    def test_listing_every_volume_follows_listall(self, lo: Harness) -> None:
        world(lo, {})
        assert run_as(lo, CAROL, build.list_volumes()).status == om_pb2.OK
        closed = AclPolicy(acl_enabled=True, admins=frozenset({ADMIN}),
                           volume_listall_allowed=False)
        response = run_as(lo, CAROL, build.list_volumes(), closed)
        assert response.message == ("User carol doesn't have LIST permission to access "
                                    "VOLUME Volume:/")
        assert run_as(lo, ADMIN, build.list_volumes(), closed).status == om_pb2.OK


class TestOrderOfChecks:
    def test_off_by_default(self, lo: Harness) -> None:
        world(lo, {})
        assert run_as(lo, CAROL, build.delete_key(V, B, K), AclPolicy()).status == om_pb2.OK

    def test_the_volume_owner_may_do_anything_in_it(self, lo: Harness) -> None:
        world(lo, {})
        lo.ok(build.set_volume_property(V, owner=CAROL), user=ADMIN)
        for request in (build.lookup_key(V, B, K), build.set_acl(key_obj(), []),
                        build.delete_key(V, B, K), build.delete_bucket(V, B),
                        build.delete_volume(V)):
            response = run_as(lo, CAROL, request)
            assert response.status == om_pb2.OK, response.message

    def test_the_bucket_owner_needs_read_on_the_volume(self, lo: Harness) -> None:
        world(lo, {})
        lo.ok(build.create_bucket(V, "bucket2", owner=CAROL), user=ADMIN)
        response = run_as(lo, CAROL, build.info_bucket(V, "bucket2"))
        assert response.message.startswith("User carol doesn't have READ permission to "
                                           "access VOLUME")
        lo.ok(build.add_acl(build.acl_object(V), acl("user:carol:r")), user=ADMIN)
        for request in (build.info_bucket(V, "bucket2"), build.list_keys(V, "bucket2"),
                        build.create_key(V, "bucket2", "mine"), build.delete_bucket(V, "bucket2")):
            assert run_as(lo, CAROL, request).status != om_pb2.PERMISSION_DENIED

    def test_deny_lists_come_before_administrators(self, lo: Harness) -> None:
        world(lo, {})
        policy = AclPolicy(acl_enabled=True, admins=frozenset({ADMIN, "*"}),
                           blacklist_users=frozenset({ADMIN}),
                           read_blacklist_groups=frozenset({"peekers"}),
                           groups={CAROL: ("peekers",)})
        assert run_as(lo, ADMIN, build.info_volume(V), policy).status == om_pb2.PERMISSION_DENIED
        assert run_as(lo, CAROL, build.info_volume(V), policy).status == om_pb2.PERMISSION_DENIED
        assert run_as(lo, CAROL, build.set_volume_property(V, quota_in_namespace=5),
                      policy).status == om_pb2.OK   # "*": every other user is an administrator

    def test_read_only_administrators_read_and_list_only(self, lo: Harness) -> None:
        world(lo, {})
        policy = AclPolicy(acl_enabled=True, admins=frozenset({ADMIN}),
                           readonly_admin_groups=frozenset({"auditors"}),
                           groups={CAROL: ("staff", "auditors")})
        for request in (build.info_volume(V), build.list_buckets(V), build.lookup_key(V, B, K),
                        build.list_keys(V, B), build.get_acl(key_obj())):
            assert run_as(lo, CAROL, request, policy).status == om_pb2.OK
        for request in (build.delete_key(V, B, K), build.create_bucket(V, "bucket2"),
                        build.add_acl(key_obj(), acl("user:carol:a"))):
            assert run_as(lo, CAROL, request, policy).status == om_pb2.PERMISSION_DENIED

    def test_group_and_world_entries_match(self, lo: Harness) -> None:
        world(lo, {})
        policy = AclPolicy(acl_enabled=True, admins=frozenset({ADMIN}),
                           groups={CAROL: ("staff", "dev")})
        lo.ok(build.add_acl(build.acl_object(V), acl("world::r")), user=ADMIN)
        lo.ok(build.add_acl(build.acl_object(V, B), acl("group:dev:r")), user=ADMIN)
        lo.ok(build.add_acl(key_obj(), acl("anonymous::r")), user=ADMIN)
        assert run_as(lo, CAROL, build.lookup_key(V, B, K), policy).status == om_pb2.OK
        assert run_as(lo, "dave", build.lookup_key(V, B, K), policy).message.startswith(
            "User dave doesn't have READ permission to access KEY")

    def test_none_grants_nothing_and_default_entries_count(self, lo: Harness) -> None:
        world(lo, {"volume": "rn"})
        assert run_as(lo, CAROL, build.info_volume(V)).status == om_pb2.PERMISSION_DENIED
        lo.ok(build.set_acl(build.acl_object(V), [acl("user:carol:r[DEFAULT]")]), user=ADMIN)
        assert run_as(lo, CAROL, build.info_volume(V)).status == om_pb2.OK   # as in Ozone

    def test_missing_objects_get_their_not_found(self, lo: Harness) -> None:
        world(lo, {"volume": "r", "bucket": "r"})
        assert status_name(run_as(lo, CAROL, build.info_volume("nope"))) == "VOLUME_NOT_FOUND"
        assert status_name(run_as(lo, CAROL, build.lookup_key(V, B, "nope"))) == "KEY_NOT_FOUND"
        deleted = run_as(lo, CAROL, build.delete_key(V, B, "nope"))
        assert (status_name(deleted), deleted.message) == (
            "KEY_NOT_FOUND", f"Key not found, checkAccess failed. Key:/{V}/{B}/nope")

    def test_needs_of_every_request_is_known(self) -> None:
        assert [(n.resource, n.right, n.key) for n in needs_of(
            build.rename_key(V, B, K, "k2"))] == [(om_pb2.OzoneObj.KEY, acls.DELETE, K),
                                                  (om_pb2.OzoneObj.KEY, acls.CREATE, "k2")]


async def test_the_leader_denies_before_it_locks_or_writes(tmp_path: Path) -> None:
    leader = LeaderUnderTest(tmp_path / "db", config(acl=POLICY))
    await leader.start()
    try:
        await leader.call(build.create_volume(V), user=ADMIN)
        denied = await leader.call(build.create_bucket(V, B), user=CAROL)
        assert (status_name(denied), denied.message) == (
            "PERMISSION_DENIED", f"User carol doesn't have WRITE permission to access VOLUME "
                                 f"Volume:{V} Bucket:{B}")
        added = await leader.call(build.add_acl(build.acl_object(V), acl("user:carol:w")),
                                  user=ADMIN)
        assert added.add_acl.response
        assert (await leader.call(build.create_bucket(V, B), user=CAROL)).status == om_pb2.OK
        leader.assert_idle()
    finally:
        await leader.close()


# =================================================================== config ===

class TestConfig:
    def test_groups_from_a_toml_or_json_file(self, tmp_path: Path) -> None:
        (tmp_path / "groups.toml").write_text('alice = ["dev", "ops"]\nbob = []\n')
        (tmp_path / "groups.json").write_text(json.dumps({"carol": ["audit"]}))
        toml = tmp_path / "om.toml"
        toml.write_text(f'acl_enabled = true\nadmins = ["root"]\nreadonly_admins = ["ro"]\n'
                        f'volume_listall_allowed = false\n'
                        f'group_mapping_file = "{tmp_path / "groups.toml"}"\n')
        policy = acl_policy(load(toml))
        assert policy.groups == {"alice": ("dev", "ops"), "bob": ()}
        assert (policy.acl_enabled, policy.admins, policy.readonly_admins,
                policy.volume_listall_allowed) == (True, frozenset({"root"}),
                                                   frozenset({"ro"}), False)
        as_json = load(None, group_mapping_file=tmp_path / "groups.json")
        assert as_json.user_groups == {"carol": ("audit",)}

    def test_a_node_enforces_the_whole_policy(self, tmp_path: Path) -> None:
        (tmp_path / "groups.toml").write_text('alice = ["dev"]\n')
        configured = load(None, acl_enabled=True, readonly_admins=("ro",),
                          blacklist_users=("mallory",),
                          group_mapping_file=tmp_path / "groups.toml")
        assert leader_config(configured).acl == acl_policy(configured)

    @pytest.mark.parametrize(("toml", "groups", "message"), [
        ('user_groups = {{a = ["b"]}}', None, "keep the groups in a file"),
        ('admins = "root"', None, "admins must be a list"),
        ("group_mapping_file = '{groups}'", 'alice = "dev"', "must be a list"),
        ("group_mapping_file = '{groups}'", "alice = [", "cannot read group_mapping_file"),
        ("group_mapping_file = '{missing}'", None, "cannot read group_mapping_file"),
    ])
    def test_bad_settings_are_refused(self, tmp_path: Path, toml: str, groups: str | None,
                                      message: str) -> None:
        if groups is not None:
            (tmp_path / "g.toml").write_text(groups)
        path = tmp_path / "om.toml"
        path.write_text(toml.format(groups=tmp_path / "g.toml", missing=tmp_path / "none"))
        with pytest.raises(ConfigError, match=message):
            load(path)


# ======================================================= file-system buckets ===

FS_BUCKET = "fsbucket"
FS_RULES: dict[str, tuple[Callable[[], om_pb2.OMRequest], str, str]] = {
    # request, carol's bucket right it needs, the right Ozone's denial names without it
    # (as for CreateKey: a new path's CREATE is decided by the bucket's WRITE)
    "CreateDirectory": (lambda: build.create_directory(V, FS_BUCKET, "a/new"), "w", "CREATE"),
    "CreateFile": (lambda: build.create_file(V, FS_BUCKET, "a/f", recursive=True), "w", "CREATE"),
    "LookupFile": (lambda: build.lookup_file(V, FS_BUCKET, "a/file"), "r", "READ"),
    "GetFileStatus": (lambda: build.get_file_status(V, FS_BUCKET, "a"), "r", "READ"),
    "ListStatus": (lambda: build.list_status(V, FS_BUCKET, "a"), "l", "LIST"),
}


def fs_world(h: Harness, bucket_rights: str) -> None:
    """vol1/fsbucket (file-system layout) holding a/file, the admin's, carol holding
    READ on the volume and ``bucket_rights`` on the bucket."""
    h.ok(build.create_volume(V), user=ADMIN)
    h.ok(build.create_bucket(V, FS_BUCKET, layout="FILE_SYSTEM_OPTIMIZED"), user=ADMIN)
    opened = h.ok(build.create_file(V, FS_BUCKET, "a/file", recursive=True),
                  user=ADMIN).create_file
    h.ok(build.commit_key(V, FS_BUCKET, "a/file", opened.client_session_id, 0), user=ADMIN)
    _set(h, build.acl_object(V), "r")
    _set(h, build.acl_object(V, FS_BUCKET), bucket_rights)


class TestFileSystemBuckets:
    """The bucket's and volume's rights decide for paths in a file-system bucket (a
    directory's or file's own entries are not consulted yet: om/gatekeeper/authorize.py)."""

    @pytest.mark.parametrize("name", list(FS_RULES))
    def test_the_bucket_right_allows_it(self, lo: Harness, name: str) -> None:
        request, right, _ = FS_RULES[name]
        fs_world(lo, right)
        response = run_as(lo, CAROL, request())
        assert status_name(response) == "OK", response.message

    @pytest.mark.parametrize("name", list(FS_RULES))
    def test_without_it_the_request_is_denied(self, lo: Harness, name: str) -> None:
        request, right, word = FS_RULES[name]
        fs_world(lo, BASIC.replace(right, ""))
        before = lo.data_digests()
        response = run_as(lo, CAROL, request())
        assert status_name(response) == "PERMISSION_DENIED"
        assert response.message.startswith(f"User {CAROL} doesn't have {word} permission"), \
            response.message
        assert lo.data_digests() == before
