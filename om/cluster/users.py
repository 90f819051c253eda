"""Users of a secure cluster as an operator manages them: what ``om admin user add |
revoke | list`` (``om/cli/admin/user.py``) and ``om cluster up`` run.

A user is a client certificate from the cluster's CA: its CN is the user, its OU
entries the user's groups (om/security/certificates.py). The cluster keeps the
certificates on record, and which are revoked (om/executor/security/user_certificates.py):

* **add**: the certificate and its key are made in memory, the cluster records
  the certificate (AddUserCertificate, for administrators only: the call carries
  the operator's certificate), and only then are both written, mode 0600, to the
  CA's directory as ``user-NAME.pem`` and ``user-NAME.key`` (replacing older
  files of that user; an older certificate stays valid until revoked). So a
  certificate on record was issued with an administrator's consent; the CA's key
  itself (``ca.key``, mode 0600) stays with the operator who ran ``om cluster
  up``, and whoever reads it could sign certificates the cluster never recorded.
* **register**: records a certificate already written (``om cluster up``'s, for
  its operator), so it is listed and can be revoked like the others.
* **revoke**: every certificate of the user on record; each node refuses them
  from the moment it applied the revocation (UNAUTHORIZED).
* **certificates**: every row on record, by user then serial, a page at a time,
  at most ``LIST_PAGES_MAX`` pages.

Refusals come back as the client's ``OMStatusError`` (PERMISSION_DENIED for a
user who is not an administrator, USER_NOT_FOUND, INVALID_REQUEST, ...).
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from pathlib import Path

from om.client import OMClient
from om.client import requests as build
from om.client.retry_policy import RetryPolicy
from om.executor.security import user_certificates
from om.protocol import om_pb2
from om.security.certificates import CertificateAuthority, Issued, read_client_certificate
from om.security.tls import ClientTls

LIST_PAGES_MAX = 100
PAGE_ROWS = user_certificates.LIST_PAGE_MAX


def _client(addresses: Sequence[str], tls: ClientTls | None, timeout_s: float) -> OMClient:
    return OMClient(addresses, policy=RetryPolicy(deadline_s=timeout_s), tls=tls)


def add(ca_directory: Path, addresses: Sequence[str], tls: ClientTls | None, name: str,
        groups: tuple[str, ...], valid_for: datetime.timedelta,
        timeout_s: float) -> tuple[Issued, om_pb2.UserCertificate]:
    """Issues, records, then writes a certificate for ``name`` (see the module)."""
    made = CertificateAuthority.load(ca_directory).make_client(name, groups, valid_for)
    with _client(addresses, tls, timeout_s) as client:
        response = client.call(build.add_user_certificate(name, made.serial, groups,
                                                          made.not_after_ms))
    return made.write(ca_directory), response.add_user_certificate.certificate


def register(cert_file: Path, addresses: Sequence[str], tls: ClientTls | None,
             timeout_s: float) -> om_pb2.UserCertificate:
    """Records the certificate already written to ``cert_file``."""
    user, groups, serial, not_after_ms = read_client_certificate(cert_file)
    with _client(addresses, tls, timeout_s) as client:
        response = client.call(build.add_user_certificate(user, serial, groups, not_after_ms))
    return response.add_user_certificate.certificate


def revoke(addresses: Sequence[str], tls: ClientTls | None, name: str,
           timeout_s: float) -> list[om_pb2.UserCertificate]:
    """Revokes every certificate of ``name`` on record; those this call revoked."""
    with _client(addresses, tls, timeout_s) as client:
        response = client.call(build.revoke_user_certificates(name))
    return list(response.revoke_user_certificates.revoked)


def certificates(addresses: Sequence[str], tls: ClientTls | None,
                 timeout_s: float) -> tuple[list[om_pb2.UserCertificate], bool]:
    """Every certificate on record, by user then serial, and whether more were left
    out (past LIST_PAGES_MAX pages)."""
    rows: list[om_pb2.UserCertificate] = []
    with _client(addresses, tls, timeout_s) as client:
        for _ in range(LIST_PAGES_MAX):
            after = rows[-1] if rows else om_pb2.UserCertificate()
            page = client.call(build.list_user_certificates(
                after.user, after.serial, PAGE_ROWS)).list_user_certificates
            rows.extend(page.certificates)
            if not page.truncated:
                return rows, False
    return rows, True
