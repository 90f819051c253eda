"""Delegation tokens, as Ozone has them: issued, renewed, cancelled and checked.

A token is an identifier (``OMTokenProto``: owner, renewer, real user, issue
date, max date, sequence number, master key id) and its password, the
HMAC-SHA256 of the identifier's bytes under a secret key. The OM alone holds
the secret keys, so a client cannot forge or alter a token; a client holding
one acts as its owner without a certificate. The token's shape, its text form
and how it prints, which clients need too, are ``om/protocol/token_format.py``;
the rules that need the secret keys and the tables are here.

Secret keys live in ``secretKeyTable``. The leader makes them: the node that
takes a GetDelegationToken attaches 32 fresh random bytes to it
(``OMRequest.secret_key_candidate``), and the handler turns them into a new key
when the newest is older than the rotation interval (or there is none). The
key row is written like any other row, so it reaches every node through Raft
and every node validates tokens; the old flow replicates the request with the
bytes and every node's apply makes the same row. A key signs new tokens for one
rotation interval and is kept until every token it signed is past its max date
(``expiry_date``), then dropped by the next issue. At most ``SECRET_KEYS_MAX``
keys are kept (``om.config`` bounds max lifetime / rotation to fit).

Token state lives in ``delegationTokenTable``, one row per token keyed by its
max date then its sequence number (the issuing request's managed index, unique
across failovers): its expiry (renew date) and whether it was cancelled. A
token is valid while its signature checks out under a key this node holds, its
row exists, is not cancelled, and neither its expiry nor its max date has
passed. Renewing moves the expiry to ``min(max date, now + renew interval)``;
only the renewer named in the token may, with a certificate. Cancelling, by the
owner or the renewer, marks the row; rows past their max date are purged by
later issues, oldest first. Issuing stops (TOKEN_CREATION_ERROR) while the kept
keys signed ``tokens_max`` tokens, which bounds the table.

Everything here is pure over a ``ReadView`` and a ``ChangeRecorder``: the
handlers (``om/executor/security/*_delegation_token.py``) run it on the leader
(or in every node's apply, in the old flow), the server runs ``authenticate``
for a request that carries a token instead of a certificate.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import Limits
from om.executor.errors import OMError
from om.protocol import om_pb2
from om.protocol.token_format import (
    IDENTIFIER_MAX_BYTES,
    KIND,
    VERSION,
    TokenFormatError,
    describe,
    identifier_of,
    instant,
)
from om.schema import tables
from om.schema.read_view import ReadView

SECRET_BYTES = 32                   # HMAC-SHA256 keys and passwords
SECRET_KEYS_MAX = 1024              # secret keys kept at most (om.config keeps max
                                    # lifetime / rotation <= 1000, so ~1002 are kept)
PURGE_ROWS = 64                     # dead token rows an issue deletes at most


def sign(secret: bytes, identifier: bytes) -> bytes:
    """The token password: HMAC-SHA256 of the identifier's bytes."""
    assert len(secret) == SECRET_BYTES
    return hmac.new(secret, identifier, hashlib.sha256).digest()


# ------------------------------------------------------------------- validation ---

def _invalid(message: str) -> OMError:
    return OMError(om_pb2.INVALID_TOKEN, message)


@dataclass(frozen=True)
class Verified:
    """A token whose signature checked out, with its row."""

    identifier: om_pb2.OMTokenProto
    row: om_pb2.DelegationTokenInfo
    row_key: bytes

    @property
    def name(self) -> str:
        """How messages name the token."""
        return f"({describe(self.identifier)})"


def verify(token: om_pb2.TokenProto, view: ReadView) -> Verified:
    """The token, when a key this node holds signed it and its row exists; else
    INVALID_TOKEN. Says nothing about time or cancellation."""
    try:
        identifier = identifier_of(token)
    except TokenFormatError as error:
        raise _invalid(str(error)) from None
    raw_key = view.get(om_pb2.SECRET_KEY, tables.secret_key_key(identifier.master_key_id))
    if raw_key is None:
        raise _invalid(f"token ({describe(identifier)}) was signed by secret key "
                       f"{identifier.master_key_id}, which this OM does not hold (never "
                       "issued, or dropped after every token it signed passed its max date)")
    key = om_pb2.SecretKey.FromString(raw_key)
    if not hmac.compare_digest(sign(key.secret, token.identifier), token.password):
        raise _invalid("Tampered/Invalid token: its signature does not match secret key "
                       f"{identifier.master_key_id}")
    row_key = tables.delegation_token_key(identifier.max_date, identifier.sequence_number)
    raw_row = view.get(om_pb2.DELEGATION_TOKEN, row_key)
    row = None if raw_row is None else om_pb2.DelegationTokenInfo.FromString(raw_row)
    if row is None or row.identifier != token.identifier:
        raise _invalid(f"token ({describe(identifier)}) can't be found: it was purged after "
                       "its max date, or never issued")
    return Verified(identifier, row, row_key)


def _expired(verified: Verified, now_ms: int) -> OMError | None:
    """TOKEN_EXPIRED when the token is past its max date or its expiry."""
    identifier, row = verified.identifier, verified.row
    if now_ms > identifier.max_date:
        return OMError(om_pb2.TOKEN_EXPIRED,
                       f"token {verified.name} passed its max date "
                       f"{instant(identifier.max_date)} (current time {instant(now_ms)}): "
                       "get a new one")
    if now_ms > row.expiry_date:
        return OMError(om_pb2.TOKEN_EXPIRED,
                       f"token {verified.name} is expired, current time: {instant(now_ms)} "
                       f"expected renewal time: {instant(row.expiry_date)}")
    return None


def authenticate(token: om_pb2.TokenProto, view: ReadView, now_ms: int) -> om_pb2.OMTokenProto:
    """The identifier of a token a request may act under (as its owner); INVALID_TOKEN
    for a forged, unknown or cancelled one, TOKEN_EXPIRED for an expired one."""
    verified = verify(token, view)
    if verified.row.cancelled:
        raise _invalid(f"token {verified.name} was cancelled")
    expired = _expired(verified, now_ms)
    if expired is not None:
        raise expired
    return verified.identifier


# ------------------------------------------------------- issue, renew, cancel ---

def _keys(view: ReadView) -> list[om_pb2.SecretKey]:
    """Every secret key, oldest first (there are at most SECRET_KEYS_MAX)."""
    rows = view.scan(om_pb2.SECRET_KEY, b"", None, SECRET_KEYS_MAX + 1)
    assert len(rows) <= SECRET_KEYS_MAX, "more secret keys than an issue ever keeps"
    return [om_pb2.SecretKey.FromString(value) for _, value in rows]


def _purge(view: ReadView, recorder: ChangeRecorder, now_ms: int) -> None:
    """Deletes up to PURGE_ROWS token rows past their max date (they come first)."""
    for key, _ in view.scan(om_pb2.DELEGATION_TOKEN, b"", None, PURGE_ROWS):
        if tables.delegation_token_key_max_date_ms(key) >= now_ms:
            return
        recorder.delete(om_pb2.DELEGATION_TOKEN, key)


def _signing_key(view: ReadView, recorder: ChangeRecorder, now_ms: int, limits: Limits,
                 candidate: bytes) -> tuple[om_pb2.SecretKey, int]:
    """The key to sign with (a new one when rotation is due; the keys every token of
    which passed its max date are dropped) and how many tokens the kept keys signed."""
    keys = _keys(view)
    newest = keys[-1] if keys else None
    due = newest is None or now_ms >= newest.creation_date + limits.token_key_rotation_ms
    live = sum(1 for key in keys if key.expiry_date >= now_ms)
    rotating = due and live < SECRET_KEYS_MAX
    if rotating:
        if len(candidate) != SECRET_BYTES:
            raise OMError(om_pb2.TOKEN_CREATION_ERROR,
                          "a new secret key is due but the request carries no key material "
                          "(the node that takes a GetDelegationToken attaches it)")
        key_id = newest.key_id + 1 if newest is not None else 1
        assert key_id < 1 << 32, "secret key ids exhausted"
        newest = om_pb2.SecretKey(
            key_id=key_id, secret=candidate, creation_date=now_ms,
            expiry_date=now_ms + limits.token_key_rotation_ms + limits.token_max_lifetime_ms)
    assert newest is not None
    kept = [newest] if rotating else []
    for key in keys:
        if key is not newest and key.expiry_date < now_ms:
            recorder.delete(om_pb2.SECRET_KEY, tables.secret_key_key(key.key_id))
        else:
            kept.append(key)
    return newest, sum(key.tokens_issued for key in kept)


def issue(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder, now_ms: int,
          sequence_number: int, limits: Limits) -> om_pb2.GetDelegationTokenResponse:
    """GetDelegationToken for ``request.user``: signs a new token and records its row
    (and a new secret key, when one is due; retired keys and dead rows go)."""
    owner = request.user
    if not owner:
        raise OMError(om_pb2.PERMISSION_DENIED, "a delegation token is issued only to an "
                                                "authenticated user")
    renewer = request.get_delegation_token.renewer or owner   # both checked at the gate
    key, issued = _signing_key(view, recorder, now_ms, limits, request.secret_key_candidate)
    if issued >= limits.tokens_max:
        raise OMError(om_pb2.TOKEN_CREATION_ERROR,
                      f"the secret keys kept signed {issued} delegation tokens, the most "
                      "this OM keeps (tokens.tokens_max): cancelled and expired ones count "
                      "until every token of their key passed its max date")
    max_date = now_ms + limits.token_max_lifetime_ms
    identifier = om_pb2.OMTokenProto(
        type=om_pb2.OMTokenProto.DELEGATION_TOKEN, version=VERSION, owner=owner,
        renewer=renewer, issue_date=now_ms, max_date=max_date,
        sequence_number=sequence_number, master_key_id=key.key_id)
    identifier_bytes = identifier.SerializeToString(deterministic=True)
    assert len(identifier_bytes) <= IDENTIFIER_MAX_BYTES
    expiry = min(max_date, now_ms + limits.token_renew_interval_ms)
    _purge(view, recorder, now_ms)
    signer = om_pb2.SecretKey()
    signer.CopyFrom(key)
    signer.tokens_issued += 1
    signer.expiry_date = max(signer.expiry_date, max_date)   # outlives every token it signs
    recorder.put(om_pb2.SECRET_KEY, tables.secret_key_key(signer.key_id),
                 signer.SerializeToString(deterministic=True))
    _put_row(recorder, tables.delegation_token_key(max_date, sequence_number),
             om_pb2.DelegationTokenInfo(identifier=identifier_bytes, expiry_date=expiry))
    token = om_pb2.TokenProto(identifier=identifier_bytes,
                              password=sign(signer.secret, identifier_bytes), kind=KIND)
    return om_pb2.GetDelegationTokenResponse(token=token, expiry_date=expiry)


def _put_row(recorder: ChangeRecorder, key: bytes, row: om_pb2.DelegationTokenInfo) -> None:
    recorder.put(om_pb2.DELEGATION_TOKEN, key, row.SerializeToString(deterministic=True))


def renew(user: str, token: om_pb2.TokenProto, view: ReadView, recorder: ChangeRecorder,
          now_ms: int, limits: Limits) -> int:
    """RenewDelegationToken by ``user``: the new expiry (ms), recorded in the row."""
    verified = verify(token, view)
    identifier = verified.identifier
    if now_ms > identifier.max_date:
        raise OMError(om_pb2.TOKEN_EXPIRED,
                      f"{user} tried to renew an expired token {verified.name} max expiration "
                      f"date: {instant(identifier.max_date)} currentTime: {instant(now_ms)}")
    if verified.row.cancelled:
        raise _invalid(f"token {verified.name} was cancelled")
    expired = _expired(verified, now_ms)
    if expired is not None:
        raise expired
    if not identifier.renewer:
        raise OMError(om_pb2.PERMISSION_DENIED,
                      f"{user} tried to renew a token {verified.name} without a renewer")
    if identifier.renewer != user:
        raise OMError(om_pb2.PERMISSION_DENIED,
                      f"{user} tries to renew a token {verified.name} with non-matching "
                      f"renewer {identifier.renewer}")
    expiry = min(identifier.max_date, now_ms + limits.token_renew_interval_ms)
    row = om_pb2.DelegationTokenInfo()
    row.CopyFrom(verified.row)
    row.expiry_date = expiry
    _put_row(recorder, verified.row_key, row)
    return expiry


def cancel(user: str, token: om_pb2.TokenProto, view: ReadView,
           recorder: ChangeRecorder) -> None:
    """CancelDelegationToken by ``user`` (its owner or renewer): marks the row."""
    verified = verify(token, view)
    identifier = verified.identifier
    if user not in (identifier.owner, identifier.renewer):
        raise OMError(om_pb2.PERMISSION_DENIED,
                      f"{user} is not authorized to cancel the token {verified.name}")
    if verified.row.cancelled:
        raise _invalid(f"token {verified.name} was cancelled already")
    row = om_pb2.DelegationTokenInfo()
    row.CopyFrom(verified.row)
    row.cancelled = True
    _put_row(recorder, verified.row_key, row)
