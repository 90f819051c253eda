"""TLS contexts for the client RPC port, and the identity a connection proves.

The server requires a client certificate signed by the cluster CA
(``CERT_REQUIRED``, TLS 1.2 or later); the user of every request on that
connection is the certificate's subject CN. A request that claims another user
is refused with PERMISSION_DENIED (``claimed_user_problem``); one that claims
none acts as the CN. The certificate's subject OU entries are the user's groups
(``om admin user add --groups``), and its serial is what a revocation names
(``PeerIdentity``). Clients verify the server against the same CA.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ClientTls:
    """What a client presents and trusts."""

    cert_file: Path
    key_file: Path
    ca_file: Path

    def context(self) -> ssl.SSLContext:
        """A client context: verifies the server against the CA, presents the cert."""
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(self.ca_file))
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(str(self.cert_file), str(self.key_file))
        return context


def server_context(cert_file: Path, key_file: Path, ca_file: Path) -> ssl.SSLContext:
    """A server context that requires a client certificate signed by the CA."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca_file))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(str(cert_file), str(key_file))
    # No TLS 1.3 session tickets: om's clients never resume a session, and each
    # ticket is work and bytes at the end of every handshake.
    context.num_tickets = 0
    return context


@dataclass(frozen=True, slots=True)
class PeerIdentity:
    """What a verified client certificate proves: its user (the subject CN), the groups
    its subject's OU entries name, in their order, and its serial (upper-case hex
    without leading zeros, as ``userCertificateTable`` keys it)."""

    user: str
    groups: tuple[str, ...]
    serial: str


def serial_text(serial: int) -> str:
    """A certificate serial as ``PeerIdentity.serial`` and the revocation list spell it."""
    assert serial >= 0
    return f"{serial:X}"


def peer_identity(peer_cert: dict[str, Any] | None) -> PeerIdentity | None:
    """The identity of a verified peer certificate (``getpeercert()``); None without a
    certificate or without a subject CN."""
    if not peer_cert:
        return None
    user = None
    groups: list[str] = []
    for rdn in peer_cert.get("subject", ()):
        for attribute, value in rdn:
            if attribute == "commonName" and user is None:
                user = str(value)
            elif attribute == "organizationalUnitName":
                groups.append(str(value))
    if user is None:
        return None
    return PeerIdentity(user, tuple(groups),
                        serial_text(int(str(peer_cert.get("serialNumber", "0")), 16)))


def claimed_user_problem(claimed: str, proven: str) -> str | None:
    """Why a request claiming ``claimed`` may not run as ``proven`` (None: it may)."""
    if claimed and claimed != proven:
        return (f"User '{claimed}' is not the authenticated user '{proven}' (the client "
                "certificate's CN): a request may not act for another user")
    return None
