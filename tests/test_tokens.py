"""Delegation tokens, without a cluster: the codec and token file, and the three
handlers run through ``dispatch`` and applied to a real store in both execution
flows (``tests.handler_harness``), with ``tokens.authenticate`` reading what a node
would validate against. Timing uses the harness's fake clock.

The secure clusters (a token used without a certificate, failover, the shell) are in
tests/test_token_cluster.py."""

from __future__ import annotations

import base64
import dataclasses
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from om.client import requests as build
from om.executor import registry
from om.executor.context import Limits
from om.executor.errors import OMError
from om.executor.security import tokens
from om.gatekeeper import lock_plan
from om.gatekeeper.authorize import AclPolicy, authorize
from om.protocol import om_pb2, token_format
from om.schema import tables
from om.security.token_client import read_token_file, write_token_file
from om.statemachine.store import Store
from tests.handler_harness import LEADER, OLD, Harness, status_name

SECOND = 1000
LIMITS = Limits(token_renew_interval_ms=10 * SECOND, token_max_lifetime_ms=40 * SECOND,
                token_key_rotation_ms=20 * SECOND, tokens_max=1000)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    db = Store(tmp_path_factory.mktemp("tokens") / "db")
    yield db
    db.close()


@pytest.fixture(params=[LEADER, OLD])
def om(store: Store, request: pytest.FixtureRequest) -> Iterator[Harness]:
    """An empty store with small token lifetimes, once per execution flow."""
    harness = Harness(store, limits=LIMITS, flow=request.param)
    yield harness
    harness.close()


def get_request(renewer: str = "", candidate: bytes | None = None) -> om_pb2.OMRequest:
    """GetDelegationToken with the key material the node attaches."""
    request = build.get_delegation_token(renewer)
    request.secret_key_candidate = os.urandom(tokens.SECRET_BYTES) if candidate is None \
        else candidate
    return request


def issue(h: Harness, user: str = "alice", renewer: str = "") -> om_pb2.TokenProto:
    return h.ok(get_request(renewer), user=user).get_delegation_token.token


def check(h: Harness, token: om_pb2.TokenProto) -> om_pb2.OMTokenProto:
    """What a node validating ``token`` now decides (raises OMError when refused)."""
    return tokens.authenticate(token, h.store, h.clock.now_ms)


def refused(h: Harness, token: om_pb2.TokenProto) -> OMError:
    with pytest.raises(OMError) as caught:
        check(h, token)
    return caught.value


def identifier(token: om_pb2.TokenProto) -> om_pb2.OMTokenProto:
    return om_pb2.OMTokenProto.FromString(token.identifier)


def keys(h: Harness) -> list[om_pb2.SecretKey]:
    return [om_pb2.SecretKey.FromString(v) for _, v in h.store.iterate(om_pb2.SECRET_KEY)]


def token_rows(h: Harness) -> list[bytes]:
    return h.keys_of(om_pb2.DELEGATION_TOKEN)


# ------------------------------------------------------------------- codec ---

class TestCodec:
    TOKEN = om_pb2.TokenProto(identifier=om_pb2.OMTokenProto(
        type=om_pb2.OMTokenProto.DELEGATION_TOKEN, owner="alice").SerializeToString(),
        password=b"p" * 32, kind=token_format.KIND, service="127.0.0.1:9862")

    def test_a_token_round_trips_through_its_text(self) -> None:
        text = token_format.encode_token(self.TOKEN)
        assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                "0123456789-_=")
        assert token_format.decode_token(text + "\n") == self.TOKEN

    @pytest.mark.parametrize("text", ["", "not base64 at all!",
                                      "A" * (token_format.TOKEN_MAX_BYTES + 4),
                                      base64.urlsafe_b64encode(b"\xff\xfe garbage").decode()])
    def test_anything_else_is_refused(self, text: str) -> None:
        with pytest.raises(token_format.TokenFormatError):
            token_format.decode_token(text)

    def test_a_token_of_another_kind_is_refused(self) -> None:
        other = om_pb2.TokenProto()
        other.CopyFrom(self.TOKEN)
        other.kind = "HDFS_DELEGATION_TOKEN"
        with pytest.raises(token_format.TokenFormatError, match="not an OzoneToken"):
            token_format.decode_token(token_format.encode_token(other))

    def test_the_file_is_private_and_reads_back(self, tmp_path: Path) -> None:
        path = tmp_path / "token"
        path.write_text("old")
        path.chmod(0o644)
        write_token_file(path, self.TOKEN)
        assert path.stat().st_mode & 0o777 == 0o600
        assert read_token_file(path) == self.TOKEN

    def test_an_oversized_file_is_refused_unread(self, tmp_path: Path) -> None:
        path = tmp_path / "big"
        path.write_text(token_format.encode_token(self.TOKEN) + " " * token_format.TOKEN_MAX_BYTES)
        with pytest.raises(token_format.TokenFormatError, match="larger than a token file"):
            read_token_file(path)

    def test_print_shows_every_field(self) -> None:
        ident = om_pb2.OMTokenProto(type=om_pb2.OMTokenProto.DELEGATION_TOKEN, owner="alice",
                                    renewer="bob", issue_date=1_700_000_000_000,
                                    max_date=1_700_604_800_000, sequence_number=7,
                                    master_key_id=3)
        token = om_pb2.TokenProto(identifier=ident.SerializeToString(), kind=token_format.KIND,
                                  service="127.0.0.1:9862")
        assert token_format.token_string(token) == (
            "Kind: OzoneToken, Service: 127.0.0.1:9862, Ident: (OzoneToken owner=alice, "
            "renewer=bob, realUser=, issueDate=2023-11-14T22:13:20.000Z, "
            "maxDate=2023-11-21T22:13:20.000Z, sequenceNumber=7, masterKeyId=3)")

    def test_dates_no_calendar_holds_still_print(self) -> None:
        assert token_format.instant((1 << 64) - 1) == f"{(1 << 64) - 1} ms"

    def test_signatures_are_hmac_sha256(self) -> None:
        import hashlib
        import hmac
        secret = bytes(range(32))
        assert tokens.sign(secret, b"id") == hmac.new(secret, b"id", hashlib.sha256).digest()


# ------------------------------------------------------------------- issue ---

class TestIssue:
    def test_a_token_names_its_owner_renewer_dates_sequence_and_key(self, om: Harness) -> None:
        token = issue(om, "alice", renewer="bob")
        ident = identifier(token)
        assert (ident.owner, ident.renewer, ident.real_user) == ("alice", "bob", "")
        assert ident.issue_date == om.clock.now_ms
        assert ident.max_date == om.clock.now_ms + LIMITS.token_max_lifetime_ms
        assert ident.sequence_number == om.managed_index
        assert ident.master_key_id == 1
        assert token.kind == token_format.KIND
        assert check(om, token) == ident

    def test_the_renewer_defaults_to_the_owner_and_the_expiry_to_a_renew_interval(
            self, om: Harness) -> None:
        response = om.ok(get_request(), user="carol").get_delegation_token
        assert identifier(response.token).renewer == "carol"
        assert response.expiry_date == om.clock.now_ms + LIMITS.token_renew_interval_ms

    def test_the_key_comes_from_the_request_and_the_password_is_its_hmac(self,
                                                                         om: Harness) -> None:
        material = bytes(range(32))
        token = om.ok(get_request(candidate=material)).get_delegation_token.token
        [key] = keys(om)
        assert (key.key_id, key.secret, key.tokens_issued) == (1, material, 1)
        assert key.expiry_date == (om.clock.now_ms + LIMITS.token_key_rotation_ms
                                   + LIMITS.token_max_lifetime_ms)
        assert token.password == tokens.sign(material, token.identifier)

    def test_a_key_signs_until_rotation_then_a_new_one_does(self, om: Harness) -> None:
        assert identifier(issue(om)).master_key_id == 1
        om.clock.advance(LIMITS.token_key_rotation_ms - 1)
        last_of_first = issue(om)
        assert identifier(last_of_first).master_key_id == 1
        om.clock.advance(1)
        second = issue(om)
        assert identifier(second).master_key_id == 2
        assert [k.key_id for k in keys(om)] == [1, 2]
        check(om, last_of_first)    # the old key stays: its tokens still validate
        check(om, second)

    def test_a_key_is_dropped_once_its_tokens_passed_max_date(self, om: Harness) -> None:
        old = issue(om)
        om.clock.advance(LIMITS.token_key_rotation_ms + LIMITS.token_max_lifetime_ms + 1)
        issue(om)
        assert [k.key_id for k in keys(om)] == [2]
        error = refused(om, old)
        assert error.status == om_pb2.INVALID_TOKEN
        assert "secret key 1, which this OM does not hold" in error.message

    def test_dead_rows_are_purged_oldest_first_and_bounded(self, om: Harness) -> None:
        for _ in range(tokens.PURGE_ROWS + 3):
            issue(om)
        om.clock.advance(LIMITS.token_max_lifetime_ms + 1)
        issue(om)
        assert len(token_rows(om)) == 4    # PURGE_ROWS of the dead ones went, plus the new
        issue(om)
        assert len(token_rows(om)) == 2

    def test_issuing_stops_at_tokens_max(self, om: Harness) -> None:
        small = dataclasses.replace(LIMITS, tokens_max=3)
        om.limits = small
        for _ in range(3):
            issue(om)
        response = om.run(get_request(), user="alice")
        assert status_name(response) == "TOKEN_CREATION_ERROR", response.message
        assert "tokens.tokens_max" in response.message
        om.clock.advance(LIMITS.token_key_rotation_ms + LIMITS.token_max_lifetime_ms + 1)
        issue(om)   # the key that signed them retired: room again

    def test_a_due_key_without_material_is_refused(self, om: Harness) -> None:
        response = om.run(get_request(candidate=b""), user="alice")
        assert status_name(response) == "TOKEN_CREATION_ERROR"
        assert not keys(om)
        assert not token_rows(om)

    def test_an_anonymous_user_gets_none(self, om: Harness) -> None:
        response = om.run(get_request(), user="")
        assert status_name(response) == "PERMISSION_DENIED"

    @pytest.mark.parametrize("renewer", ["a\nb", "x" * 300])
    def test_a_malformed_renewer_is_refused(self, om: Harness, renewer: str) -> None:
        assert status_name(om.run(get_request(renewer), user="alice")) == "INVALID_REQUEST"


# --------------------------------------------------------- validate, renew, cancel ---

class TestValidate:
    def test_expired_then_renewed_then_past_max_date(self, om: Harness) -> None:
        token = issue(om, "alice")
        max_date = identifier(token).max_date
        om.clock.advance(LIMITS.token_renew_interval_ms + 1)
        error = refused(om, token)
        assert error.status == om_pb2.TOKEN_EXPIRED
        assert "is expired" in error.message
        renewed = om.run(build.renew_delegation_token(token), user="alice")
        assert status_name(renewed) == "TOKEN_EXPIRED"      # too late to renew
        fresh = issue(om, "alice")
        for _ in range(3):
            om.clock.advance(LIMITS.token_renew_interval_ms // 2)
            new_expiry = om.ok(build.renew_delegation_token(fresh),
                               user="alice").renew_delegation_token.new_expiry_time
            assert new_expiry == om.clock.now_ms + LIMITS.token_renew_interval_ms
            check(om, fresh)
        om.clock.advance(LIMITS.token_max_lifetime_ms)
        assert refused(om, fresh).status == om_pb2.TOKEN_EXPIRED
        assert "passed its max date" in refused(om, fresh).message
        assert max_date < om.clock.now_ms

    def test_renewing_never_passes_the_max_date(self, om: Harness) -> None:
        token = issue(om, "alice")
        ident = identifier(token)
        steps = 0
        while om.clock.now_ms + LIMITS.token_renew_interval_ms < ident.max_date:
            om.clock.advance(LIMITS.token_renew_interval_ms // 2)
            om.ok(build.renew_delegation_token(token), user="alice")
            steps += 1
            assert steps < 20
        last = om.ok(build.renew_delegation_token(token), user="alice")
        assert last.renew_delegation_token.new_expiry_time == ident.max_date

    def test_only_the_renewer_renews(self, om: Harness) -> None:
        token = issue(om, "alice", renewer="bob")
        denied = om.run(build.renew_delegation_token(token), user="alice")
        assert status_name(denied) == "PERMISSION_DENIED"
        assert "alice tries to renew a token" in denied.message
        assert "with non-matching renewer bob" in denied.message
        om.ok(build.renew_delegation_token(token), user="bob")

    def test_cancel_by_owner_or_renewer_only_and_then_refused(self, om: Harness) -> None:
        token = issue(om, "alice", renewer="bob")
        denied = om.run(build.cancel_delegation_token(token), user="mallory")
        assert status_name(denied) == "PERMISSION_DENIED"
        assert "mallory is not authorized to cancel the token" in denied.message
        check(om, token)
        om.ok(build.cancel_delegation_token(token), user="bob")
        error = refused(om, token)
        assert error.status == om_pb2.INVALID_TOKEN
        assert "was cancelled" in error.message
        assert status_name(om.run(build.renew_delegation_token(token), user="bob")) == \
            "INVALID_TOKEN"
        again = om.run(build.cancel_delegation_token(token), user="alice")
        assert status_name(again) == "INVALID_TOKEN"
        mine = issue(om, "alice")
        om.ok(build.cancel_delegation_token(mine), user="alice")
        assert refused(om, mine).status == om_pb2.INVALID_TOKEN

    def test_a_tampered_identifier_or_password_is_refused(self, om: Harness) -> None:
        token = issue(om, "alice")
        ident = identifier(token)
        ident.owner = "admin"
        forged = om_pb2.TokenProto()
        forged.CopyFrom(token)
        forged.identifier = ident.SerializeToString()
        error = refused(om, forged)
        assert error.status == om_pb2.INVALID_TOKEN
        assert "Tampered/Invalid token" in error.message
        flipped = om_pb2.TokenProto()
        flipped.CopyFrom(token)
        flipped.password = bytes([token.password[0] ^ 1]) + token.password[1:]
        assert "Tampered/Invalid token" in refused(om, flipped).message
        assert status_name(om.run(build.cancel_delegation_token(forged), user="admin")) == \
            "INVALID_TOKEN"

    def test_a_token_signed_by_a_key_never_issued_is_refused(self, om: Harness) -> None:
        token = issue(om, "alice")
        ident = identifier(token)
        ident.master_key_id = 99
        stranger = om_pb2.TokenProto(identifier=ident.SerializeToString(),
                                     password=tokens.sign(os.urandom(32),
                                                          ident.SerializeToString()),
                                     kind=token_format.KIND)
        assert "secret key 99" in refused(om, stranger).message

    def test_a_correctly_signed_identifier_without_a_row_is_refused(self, om: Harness) -> None:
        token = issue(om, "alice")
        [key] = keys(om)
        ident = identifier(token)
        ident.sequence_number += 1000     # never issued, but signed with the real key
        raw = ident.SerializeToString()
        ghost = om_pb2.TokenProto(identifier=raw, password=tokens.sign(key.secret, raw),
                                  kind=token_format.KIND)
        assert "can't be found" in refused(om, ghost).message

    def test_a_forged_identifier_with_absurd_dates_is_refused_cleanly(self,
                                                                     om: Harness) -> None:
        token = issue(om, "alice")
        ident = identifier(token)
        ident.max_date = (1 << 64) - 1
        ident.issue_date = (1 << 64) - 1
        forged = om_pb2.TokenProto(identifier=ident.SerializeToString(),
                                   password=token.password, kind=token_format.KIND)
        error = refused(om, forged)
        assert error.status == om_pb2.INVALID_TOKEN
        assert "Tampered/Invalid token" in error.message
        ident.master_key_id = 77
        forged.identifier = ident.SerializeToString()
        assert f"maxDate={(1 << 64) - 1} ms" in refused(om, forged).message

    @pytest.mark.parametrize("mangle", ["kind", "identifier", "huge"])
    def test_malformed_tokens_are_invalid(self, om: Harness, mangle: str) -> None:
        token = issue(om, "alice")
        bad = om_pb2.TokenProto()
        bad.CopyFrom(token)
        if mangle == "kind":
            bad.kind = "other"
        elif mangle == "identifier":
            bad.identifier = b"\xff\xff\xff"
        else:
            bad.identifier = b"x" * (token_format.IDENTIFIER_MAX_BYTES + 1)
        assert refused(om, bad).status == om_pb2.INVALID_TOKEN


class TestBothFlows:
    def test_the_flows_write_identical_token_tables(self, store: Store,
                                                    tmp_path: Path) -> None:
        other = Store(tmp_path / "db")
        try:
            digests = []
            for harness in (Harness(store, limits=LIMITS), Harness(other, LIMITS, flow=OLD)):
                material = iter([bytes([n]) * 32 for n in range(10)])
                try:
                    token = harness.ok(get_request("bob", next(material))).get_delegation_token
                    harness.clock.advance(LIMITS.token_renew_interval_ms // 2)
                    harness.ok(build.renew_delegation_token(token.token), user="bob")
                    harness.clock.advance(LIMITS.token_key_rotation_ms)
                    harness.ok(get_request("", next(material)), user="bob")
                    harness.ok(build.cancel_delegation_token(token.token), user="alice")
                    digests.append({k: v for k, v in harness.data_digests().items()
                                    if k in ("secretKeyTable", "delegationTokenTable")})
                finally:
                    harness.close()
            assert digests[0] == digests[1]
        finally:
            other.close()


class TestGatekeeping:
    @pytest.mark.parametrize("make", [lambda: build.get_delegation_token(),
                                      lambda: build.renew_delegation_token(om_pb2.TokenProto()),
                                      lambda: build.cancel_delegation_token(om_pb2.TokenProto())])
    def test_token_writes_share_one_write_lock_and_need_no_acl(
            self, make: Callable[[], om_pb2.OMRequest], store: Store) -> None:
        request = make()
        request.user = "alice"
        [lock] = lock_plan.plan_locks(request)
        assert (lock.name, lock.mode) == (lock_plan.TOKENS, lock_plan.Mode.WRITE)
        authorize(request, store, AclPolicy(acl_enabled=True))   # no right needed
        request.client_id = "c"
        assert registry.shape_problem(request) is None
        assert registry.KINDS[request.cmd_type].write

    def test_the_table_layout_puts_dead_rows_first(self) -> None:
        assert tables.delegation_token_key(5, 99) < tables.delegation_token_key(6, 1)
        assert tables.delegation_token_key_max_date_ms(tables.delegation_token_key(7, 3)) == 7
        assert tables.secret_key_key(1) < tables.secret_key_key(256)
