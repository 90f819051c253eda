"""User certificates without a cluster: the three handlers run through ``dispatch`` and
applied to a real store in both execution flows (``tests.handler_harness``), the
revocation lookup a node makes per request, the administrators-only rule, and the
groups a certificate adds to the ACLs.

The cluster walk-through (om admin user add | revoke | list, two users, every node
refusing a revoked certificate) is tests/test_users_cluster.py."""

from __future__ import annotations

import datetime
import re
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from om.client import requests as build
from om.executor import acl_rows
from om.executor.context import ExecContext, NoReservations, merged_groups
from om.executor.errors import OMError
from om.executor.security import user_certificates
from om.gatekeeper import lock_plan
from om.gatekeeper.authorize import AclPolicy, authorize, groups_of
from om.protocol import acls, om_pb2
from om.schema import tables
from om.security.certificates import (
    CertificateAuthority,
    client_certificate_problem,
    read_client_certificate,
)
from om.security.tls import PeerIdentity, peer_identity, serial_text
from om.statemachine.store import Store
from tests.handler_harness import LEADER, OLD, Harness, status_name

DAY_MS = 86_400_000
ADMIN = "admin"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    db = Store(tmp_path_factory.mktemp("certificates") / "db")
    yield db
    db.close()


@pytest.fixture(params=[LEADER, OLD])
def om(store: Store, request: pytest.FixtureRequest) -> Iterator[Harness]:
    harness = Harness(store, flow=request.param)
    yield harness
    harness.close()


def add(h: Harness, user: str, serial: str, groups: tuple[str, ...] = (),
        days: int = 30) -> om_pb2.OMResponse:
    return h.run(build.add_user_certificate(user, serial, groups,
                                            h.clock.now_ms + days * DAY_MS), user=ADMIN)


def rows(h: Harness) -> list[om_pb2.UserCertificate]:
    return [om_pb2.UserCertificate.FromString(v)
            for _, v in h.store.iterate(om_pb2.USER_CERTIFICATE)]


class TestAdd:
    def test_records_the_certificate_with_who_and_when(self, om: Harness) -> None:
        response = add(om, "alice", "1F", ("dev", "ops"))
        assert status_name(response) == "OK"
        row = response.add_user_certificate.certificate
        assert (row.user, row.serial, list(row.groups), row.issued_by, row.issued_at,
                row.revoked_at) == ("alice", "1F", ["dev", "ops"], ADMIN, om.clock.now_ms, 0)
        assert rows(om) == [row]
        assert om.store.get(om_pb2.USER_CERTIFICATE,
                            tables.user_certificate_key("alice", "1F")) is not None

    @pytest.mark.parametrize(("user", "serial", "groups", "days", "says"), [
        ("", "1F", (), 30, "user '' must be 1 to 255 bytes"),
        ("a" * 256, "1F", (), 30, "must be 1 to 255 bytes"),
        ("r\x7fot", "1F", (), 30, "or control character"),
        ("a\x00b", "1F", (), 30, "or control character"),
        ("al,ice", "1F", (), 30, "may hold no ':', ','"),
        ("al ice", "1F", (), 30, "white space"),
        ("al:ice", "1F", (), 30, "may hold no ':'"),
        ("alice", "1f", (), 30, "upper-case hexadecimal"),
        ("alice", "01F", (), 30, "without leading zeros"),
        ("alice", "F" * 41, (), 30, "at most 20 bytes"),
        ("alice", "", (), 30, "upper-case hexadecimal"),
        ("alice", "1F", ("",), 30, "group '' must be"),
        ("alice", "1F", ("d\nev",), 30, "or control character"),
        ("alice", "1F", tuple(f"g{i}" for i in range(33)), 30, "at most 32 per"),
        ("alice", "1F", (), -1, "has expired already"),
    ])
    def test_a_malformed_certificate_is_invalid_and_writes_nothing(
            self, om: Harness, user: str, serial: str, groups: tuple[str, ...], days: int,
            says: str) -> None:
        response = add(om, user, serial, groups, days)
        assert status_name(response) == "INVALID_REQUEST"
        assert says in response.message
        assert rows(om) == []

    def test_the_same_certificate_twice_is_refused(self, om: Harness) -> None:
        add(om, "alice", "1F")
        again = add(om, "alice", "1F")
        assert status_name(again) == "INVALID_REQUEST"
        assert "is on record already" in again.message
        assert status_name(add(om, "bob", "1F")) == "OK"    # another user's row

    def test_a_user_holds_a_bounded_number_and_expired_ones_make_room(
            self, om: Harness) -> None:
        cap = user_certificates.CERTIFICATES_PER_USER_MAX
        for serial in range(1, cap):
            assert status_name(add(om, "alice", f"{serial:X}")) == "OK"
        assert status_name(add(om, "alice", "ABC", days=1)) == "OK"    # the last slot
        over = add(om, "alice", "ABD")
        assert (status_name(over), "the most kept (64)" in over.message) == (
            "QUOTA_EXCEEDED", True)
        om.clock.advance(2 * DAY_MS)                                   # ABC expires
        assert status_name(add(om, "alice", "ABD")) == "OK"
        serials = {row.serial for row in rows(om)}
        assert "ABC" not in serials                                    # purged by the add
        assert len(serials) == cap


class TestRevoke:
    def test_revokes_every_certificate_of_the_user_once(self, om: Harness) -> None:
        add(om, "bob", "A1")
        add(om, "bob", "A2")
        add(om, "carol", "B1")
        response = om.run(build.revoke_user_certificates("bob"), user=ADMIN)
        assert status_name(response) == "OK"
        revoked = response.revoke_user_certificates.revoked
        assert [(r.serial, r.revoked_by, r.revoked_at) for r in revoked] == [
            ("A1", ADMIN, om.clock.now_ms), ("A2", ADMIN, om.clock.now_ms)]
        for serial in ("A1", "A2"):
            found = user_certificates.revoked(om.store, "bob", serial)
            assert found is not None
            assert found.revoked_by == ADMIN
        assert user_certificates.revoked(om.store, "carol", "B1") is None
        assert user_certificates.revoked(om.store, "bob", "FF") is None   # never recorded
        again = om.run(build.revoke_user_certificates("bob"), user=ADMIN)
        assert (status_name(again), list(again.revoke_user_certificates.revoked)) == ("OK", [])
        if om.flow == LEADER:   # the leader flow's invariant: a successful write records rows
            assert len(om.last_recorder.ops) == 2
        assert user_certificates.revoked(om.store, "bob", "A1") == revoked[0]   # as it was

    def test_a_user_without_a_certificate_on_record_is_not_found(self, om: Harness) -> None:
        add(om, "bob", "A1", days=1)
        om.clock.advance(2 * DAY_MS)
        response = om.run(build.revoke_user_certificates("bob"), user=ADMIN)
        assert status_name(response) == "USER_NOT_FOUND"
        assert "no unexpired certificate of user bob" in response.message
        assert status_name(om.run(build.revoke_user_certificates("nobody"),
                                  user=ADMIN)) == "USER_NOT_FOUND"

    def test_a_name_no_key_can_hold_is_never_revoked(self, om: Harness) -> None:
        assert user_certificates.revoked(om.store, "a\x00b", "1") is None


class TestList:
    def test_pages_by_user_then_serial(self, om: Harness) -> None:
        for user, serial in (("carol", "3"), ("alice", "2"), ("alice", "1"), ("bob", "9")):
            add(om, user, serial)
        first = om.ok(build.list_user_certificates(max_rows=3)).list_user_certificates
        assert [(r.user, r.serial) for r in first.certificates] == [
            ("alice", "1"), ("alice", "2"), ("bob", "9")]
        assert first.truncated
        last = first.certificates[-1]
        rest = om.ok(build.list_user_certificates(last.user, last.serial, 3)
                     ).list_user_certificates
        assert [(r.user, r.serial) for r in rest.certificates] == [("carol", "3")]
        assert not rest.truncated

    def test_a_page_over_the_limit_is_invalid(self, om: Harness) -> None:
        response = om.run(build.list_user_certificates(max_rows=1001))
        assert status_name(response) == "INVALID_REQUEST"


def test_adds_and_revokes_share_one_lock() -> None:
    for request in (build.add_user_certificate("a", "1", (), 1),
                    build.revoke_user_certificates("a")):
        assert lock_plan.plan_locks(request) == (lock_plan.LockRequest(
            lock_plan.Level.VOLUME, lock_plan.USER_CERTIFICATES, lock_plan.Mode.WRITE),)
    assert lock_plan.plan_locks(build.list_user_certificates()) == ()


class TestAdministratorsOnly:
    REQUESTS = (build.add_user_certificate("bob", "1", (), 1),
                build.revoke_user_certificates("bob"), build.list_user_certificates())

    @pytest.mark.parametrize("request_", REQUESTS)
    def test_only_an_administrator_may(self, store: Store, request_: om_pb2.OMRequest) -> None:
        def decide(policy: AclPolicy, user: str, groups: tuple[str, ...] = ()) -> str:
            request_.user = user
            request_.ClearField("groups")
            request_.groups.extend(groups)
            try:
                authorize(request_, store, policy)
            except OMError as error:
                return f"{om_pb2.Status.Name(error.status)}: {error.message}"
            return "OK"

        policy = AclPolicy(acl_enabled=True, admins=frozenset({ADMIN}),
                           admin_groups=frozenset({"ops"}))
        assert decide(policy, ADMIN) == "OK"
        assert decide(policy, "bob").startswith(
            "PERMISSION_DENIED: User bob is not an OM administrator")
        assert decide(policy, "olga", ("ops",)) == "OK"   # a group of her certificate
        fired = AclPolicy(acl_enabled=True, admins=frozenset({"fired"}),
                          blacklist_users=frozenset({"fired"}))
        assert decide(fired, "fired").startswith("PERMISSION_DENIED")
        assert decide(AclPolicy(), "bob") == "OK"         # ACLs off: permissive


class TestCertificateGroups:
    def test_the_mapping_comes_first_then_the_certificate(self) -> None:
        request = build.info_volume("v")
        request.user = "alice"
        request.groups.extend(["ops", "dev"])
        mapping = {"alice": ("dev",)}
        assert groups_of(mapping, request) == ("dev", "ops")
        assert groups_of({}, request) == ("ops", "dev")
        request.ClearField("groups")
        assert groups_of(mapping, request) is mapping["alice"]
        assert merged_groups(("a",), ()) == ("a",)

    def test_a_creator_without_mapped_groups_gets_its_certificates_primary_group(
            self) -> None:
        ctx = ExecContext("alice", 1, 1, NoReservations(), certificate_groups=("ops", "dev"))
        entries = acl_rows.creator_acls("alice", ctx)
        assert [str(e) for e in entries] == ["USER:alice:a[ACCESS]", "GROUP:ops:rl[ACCESS]"]
        other = acl_rows.creator_acls("bob", ctx)     # a volume's owner: not the requester
        assert [str(e) for e in other] == ["USER:bob:a[ACCESS]"]

    def test_a_group_from_the_certificate_matches_group_entries(self, om: Harness) -> None:
        policy = AclPolicy(acl_enabled=True, admins=frozenset({ADMIN}))
        om.ok(build.create_volume("team", owner=ADMIN), user=ADMIN)
        om.ok(build.add_acl(build.acl_object("team"), acls.parse("group:readers:r").to_proto()),
              user=ADMIN)
        request = build.info_volume("team")
        request.user = "bob"
        with pytest.raises(OMError, match="User bob doesn't have READ permission"):
            authorize(request, om.store, policy)
        request.groups.append("readers")
        authorize(request, om.store, policy)


class TestTheCertificate:
    def test_names_the_user_groups_and_serial_as_a_node_reads_them(self, tmp_path: Path) -> None:
        authority = CertificateAuthority.create(tmp_path)
        made = authority.make_client("bob", ("readers", "dev"), datetime.timedelta(days=2))
        issued = made.write(tmp_path)
        assert issued.cert_file.name == "user-bob.pem"
        for path in (issued.cert_file, issued.key_file):
            assert path.stat().st_mode & 0o777 == 0o600
        assert read_client_certificate(issued.cert_file) == (
            "bob", ("readers", "dev"), made.serial, made.not_after_ms)
        assert made.serial == serial_text(made.cert.serial_number)
        # what ssl's getpeercert() gives for it
        peer = ssl._ssl._test_decode_cert(str(issued.cert_file))  # type: ignore[attr-defined]
        assert peer_identity(peer) == PeerIdentity("bob", ("readers", "dev"), made.serial)
        assert peer_identity(None) is None
        assert peer_identity({"subject": ((("organizationName", "om"),),),
                              "serialNumber": "0A"}) is None           # no CN: no identity

    def test_says_why_a_node_would_refuse_it(self, tmp_path: Path) -> None:
        authority = CertificateAuthority.create(tmp_path / "ca")
        stranger = CertificateAuthority.create(tmp_path / "other")
        good = authority.make_client("alice").write(tmp_path)
        assert client_certificate_problem(good.cert_file, authority.ca_file) is None
        foreign = stranger.make_client("mallory").write(tmp_path)
        assert "it is not signed by the CA" in str(
            client_certificate_problem(foreign.cert_file, authority.ca_file))
        past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=3)
        old = authority.make_client("eve", (), datetime.timedelta(days=1), past).write(tmp_path)
        assert re.fullmatch(r"it expired on \d{4}-\d\d-\d\d \d\d:\d\d UTC", str(
            client_certificate_problem(old.cert_file, authority.ca_file)))
        assert "cannot be read" in str(client_certificate_problem(tmp_path / "none.pem",
                                                                  authority.ca_file))
