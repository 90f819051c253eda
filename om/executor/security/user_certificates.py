"""Client certificates as an operator manages them: recorded, revoked, listed, refused.

``om admin user add NAME`` makes a certificate with the cluster's CA (subject CN
``NAME``, one OU per group) and records it here before it writes the files, so a
certificate on record was issued by an administrator; ``om admin user revoke
NAME`` marks every certificate of ``NAME`` on record revoked; ``om admin user
list`` pages through them. The three requests are for administrators only
(``om/gatekeeper/authorize.py``). Add and revoke are replicated writes like any
other (the retry cache, the audit log, Raft, snapshots): a revocation is applied
by every node and survives restarts.

``userCertificateTable`` holds one row per certificate, keyed ``<user>\\0<serial>``
(``om.schema.tables``): the node looks a connection's certificate up by its CN and
serial on every request (``revoked``) and refuses a revoked one with
UNAUTHORIZED. A certificate that was never recorded (one made with the CA's key
by other means) is not refused: the table is a revocation list, not a register
of the only valid certificates.

Bounds: a user has at most ``CERTIFICATES_PER_USER_MAX`` rows; each add or revoke
first drops the user's rows past their ``not_after`` (TLS refuses an expired
certificate by itself), so only live certificates count. Every scan is bounded by
that cap or by the page size.

Pure over a ``ReadView`` and a ``ChangeRecorder``, as the handlers are.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from om.executor.change_recorder import ChangeRecorder
from om.executor.errors import OMError
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView

NAME_MAX_BYTES = 255
GROUPS_MAX = 32
CERTIFICATES_PER_USER_MAX = 64
LIST_PAGE_MAX = 1000
SERIAL = re.compile(r"0|[1-9A-F][0-9A-F]{0,39}")   # X.509: at most 20 octets, as TLS prints it
BAD_NAME = re.compile(r"[:,\s\x00-\x1f\x7f]")      # what an ACL entry's name may not hold


def name_problem(name: str, what: str) -> str | None:
    """Why ``name`` cannot be a user or group name (None: it can): empty, over
    NAME_MAX_BYTES, or holding what an ACL entry's name may not (``:``, ``,``, white
    space, a control character), since ACL entries name users and groups."""
    if not name or len(name.encode()) > NAME_MAX_BYTES:
        return f"{what} {name!r} must be 1 to {NAME_MAX_BYTES} bytes"
    if BAD_NAME.search(name):
        return f"{what} {name!r} may hold no ':', ',', white space or control character"
    return None


def _rows(view: ReadView, user: str) -> list[tuple[bytes, om_pb2.UserCertificate]]:
    """Every row of ``user`` (at most the cap, which add keeps)."""
    rows = view.scan(om_pb2.USER_CERTIFICATE, tables.user_certificate_prefix(user), None,
                     CERTIFICATES_PER_USER_MAX + 1)
    assert len(rows) <= CERTIFICATES_PER_USER_MAX, "more certificates than add ever keeps"
    return [(key, om_pb2.UserCertificate.FromString(value)) for key, value in rows]


def _live(rows: Iterable[tuple[bytes, om_pb2.UserCertificate]], recorder: ChangeRecorder,
          now_ms: int) -> list[tuple[bytes, om_pb2.UserCertificate]]:
    """The rows not past their not_after; the others are deleted."""
    live = []
    for key, row in rows:
        if row.not_after < now_ms:
            recorder.delete(om_pb2.USER_CERTIFICATE, key)
        else:
            live.append((key, row))
    return live


def _put(recorder: ChangeRecorder, key: bytes, row: om_pb2.UserCertificate) -> None:
    recorder.put(om_pb2.USER_CERTIFICATE, key, row.SerializeToString(deterministic=True))


def add(body: om_pb2.AddUserCertificateRequest, admin: str, view: ReadView,
        recorder: ChangeRecorder, now_ms: int) -> om_pb2.UserCertificate:
    """Records a certificate of ``body.user`` issued by ``admin``; INVALID_REQUEST for a
    malformed one, one already on record or already expired; QUOTA_EXCEEDED past the
    per-user cap."""
    assert name_problem(body.user, "user") is None, "the gate checked the user"
    assert len(body.groups) <= GROUPS_MAX, "the gate checked the groups"
    assert SERIAL.fullmatch(body.serial), "the gate checked the serial"
    if body.not_after <= now_ms:
        raise OMError(om_pb2.INVALID_REQUEST, f"the certificate of {body.user} (serial "
                      f"{body.serial}) has expired already")
    key = tables.user_certificate_key(body.user, body.serial)
    live = _live(_rows(view, body.user), recorder, now_ms)
    if any(row_key == key for row_key, _ in live):
        raise OMError(om_pb2.INVALID_REQUEST, f"the certificate of {body.user} with serial "
                      f"{body.serial} is on record already")
    if len(live) >= CERTIFICATES_PER_USER_MAX:
        raise OMError(om_pb2.QUOTA_EXCEEDED, f"user {body.user} holds {len(live)} unexpired "
                      f"certificates on record, the most kept ({CERTIFICATES_PER_USER_MAX}): "
                      "revoked ones count until they expire")
    row = om_pb2.UserCertificate(user=body.user, serial=body.serial, groups=body.groups,
                                 not_after=body.not_after, issued_at=now_ms, issued_by=admin)
    _put(recorder, key, row)
    return row


def revoke(user: str, admin: str, view: ReadView, recorder: ChangeRecorder,
           now_ms: int) -> list[om_pb2.UserCertificate]:
    """Marks every unrevoked, unexpired certificate of ``user`` on record revoked by
    ``admin``; returns them (empty: all were revoked already, and their rows are
    recorded as they were, so the write still carries its reply to the retry cache).
    USER_NOT_FOUND when none of ``user`` is on record."""
    assert name_problem(user, "user") is None, "the gate checked the user"
    live = _live(_rows(view, user), recorder, now_ms)
    if not live:
        raise OMError(om_pb2.USER_NOT_FOUND, f"no unexpired certificate of user {user} is "
                      "on record: om admin user add issues and records them")
    revoked = []
    for key, row in live:
        if not row.revoked_at:
            row.revoked_at = now_ms
            row.revoked_by = admin
            revoked.append(row)
        _put(recorder, key, row)
    return revoked


def list_page(body: om_pb2.ListUserCertificatesRequest,
              view: ReadView) -> om_pb2.ListUserCertificatesResponse:
    """Up to ``max_rows`` rows (by user, then serial) after the given one."""
    limit = body.max_rows or LIST_PAGE_MAX
    assert limit <= LIST_PAGE_MAX, "the gate bounds a page"
    start_after = None
    if body.start_after_user:
        start_after = tables.user_certificate_key(body.start_after_user,
                                                  body.start_after_serial)
    rows = view.scan(om_pb2.USER_CERTIFICATE, b"", start_after, limit + 1)
    return om_pb2.ListUserCertificatesResponse(
        certificates=[om_pb2.UserCertificate.FromString(value) for _, value in rows[:limit]],
        truncated=len(rows) > limit)


def revoked(view: ReadView, user: str, serial: str) -> om_pb2.UserCertificate | None:
    """The row of ``user``'s certificate ``serial`` when it was revoked, else None."""
    if "\0" in user:
        return None   # never a key: no such row
    raw = view.get(om_pb2.USER_CERTIFICATE, tables.user_certificate_key(user, serial))
    if raw is None:
        return None
    row = om_pb2.UserCertificate.FromString(raw)
    return row if row.revoked_at else None
