"""A cluster's own certificate authority, and the certificates it issues.

``om cluster up`` (by default) makes a CA (EC P-256, ten years), one server
certificate per node (subject CN = the node id, SAN 127.0.0.1 and localhost)
and a client certificate for the user who ran it; ``om admin user add`` makes one
per user (subject CN = the user name, one OU per group, a year by default), with
the ``cryptography`` package. Private keys, and client certificates, are written
with mode 0600. The user a client acts as is its certificate's CN, its groups
its OU entries: that is what the server trusts, never a field the client fills in.
``client_certificate_problem`` says why a node would refuse a client certificate,
for the tools' one-line diagnoses.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from om.security.tls import serial_text

VALIDITY = datetime.timedelta(days=3650)
USER_VALIDITY = datetime.timedelta(days=365)   # Ozone's hdds.x509.default.duration
CLOCK_SKEW = datetime.timedelta(minutes=5)     # valid from a little before it was made
PrivateKey = ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class Issued:
    """Where one certificate and its key were written."""

    cert_file: Path
    key_file: Path


def _name(common_name: str, units: tuple[str, ...] = ()) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "om"),
                      *(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit)
                        for unit in units),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_private(data: bytes, path: Path) -> None:
    """Writes ``path`` (replacing it), readable by its owner only."""
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)


def _write_key(key: PrivateKey, path: Path) -> None:
    _write_private(key.private_bytes(serialization.Encoding.PEM,
                                     serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()), path)


def _write_cert(cert: x509.Certificate, path: Path) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _builder(subject: x509.Name, issuer: x509.Name, key: PrivateKey,
             valid_for: datetime.timedelta = VALIDITY,
             not_before: datetime.datetime | None = None) -> x509.CertificateBuilder:
    """Valid for ``valid_for`` from ``not_before`` (default: now, and from CLOCK_SKEW
    before it for clocks a little behind)."""
    start = not_before or datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start if not_before else start - CLOCK_SKEW)
            .not_valid_after(start + valid_for))


@dataclass(frozen=True)
class ClientCertificate:
    """A client certificate and its key, made in memory (``CertificateAuthority.make_client``)
    and written only by ``write``: ``om admin user add`` writes them once the cluster
    recorded the certificate."""

    user: str
    groups: tuple[str, ...]
    cert: x509.Certificate
    key: PrivateKey

    @property
    def serial(self) -> str:
        """The serial as TLS reports it and the revocation list keys it."""
        return serial_text(self.cert.serial_number)

    @property
    def not_after_ms(self) -> int:
        """When TLS stops accepting it, in ms since the epoch."""
        return int(self.cert.not_valid_after_utc.timestamp() * 1000)

    def write(self, directory: Path) -> Issued:
        """Writes ``user-<user>.pem`` and ``.key`` to ``directory`` (replacing them), both
        readable by their owner only."""
        issued = Issued(directory / f"user-{self.user}.pem", directory / f"user-{self.user}.key")
        _write_key(self.key, issued.key_file)
        _write_private(self.cert.public_bytes(serialization.Encoding.PEM), issued.cert_file)
        return issued


def read_client_certificate(path: Path) -> tuple[str, tuple[str, ...], str, int]:
    """(user, groups, serial, not_after ms) of the client certificate in ``path``."""
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    subject = cert.subject
    users = subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    assert users, f"{path}: a client certificate without a CN"
    groups = tuple(str(unit.value)
                   for unit in subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME))
    return (str(users[0].value), groups, serial_text(cert.serial_number),
            int(cert.not_valid_after_utc.timestamp() * 1000))


def client_certificate_problem(cert_file: Path, ca_file: Path,
                               now: datetime.datetime | None = None) -> str | None:
    """Why a node trusting ``ca_file`` refuses the client certificate ``cert_file`` at
    the TLS handshake ("it expired on ...", "it is not signed by ..."): expired, not
    valid yet, not signed by that CA, unreadable; None when it sees no reason."""
    try:
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
        authority = x509.load_pem_x509_certificate(ca_file.read_bytes())
    except (OSError, ValueError) as error:
        return f"it or the CA {ca_file} cannot be read: {error}"
    now = now or datetime.datetime.now(datetime.UTC)
    if cert.not_valid_after_utc < now:
        return f"it expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
    if cert.not_valid_before_utc > now:
        return f"it is not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
    try:
        cert.verify_directly_issued_by(authority)
    except (ValueError, TypeError, InvalidSignature):
        return (f"it is not signed by the CA {ca_file}, which signed the OM's certificate "
                "(it is another cluster's)")
    return None


class CertificateAuthority:
    """A CA whose certificate and key live in ``directory`` (``create`` or ``load``)."""

    def __init__(self, directory: Path, key: PrivateKey, cert: x509.Certificate) -> None:
        self.directory = directory
        self.key = key
        self.cert = cert

    @classmethod
    def create(cls, directory: Path, name: str = "om cluster CA") -> CertificateAuthority:
        """A new CA, written to ``directory`` (key mode 0600)."""
        directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (_builder(_name(name), _name(name), key)
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .sign(key, hashes.SHA256()))
        authority = cls(directory, key, cert)
        _write_key(key, authority.ca_key_file)
        _write_cert(cert, authority.ca_file)
        return authority

    @classmethod
    def load(cls, directory: Path) -> CertificateAuthority:
        """The CA written to ``directory`` before (to issue more certificates)."""
        key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        cert = x509.load_pem_x509_certificate((directory / "ca.pem").read_bytes())
        return cls(directory, key, cert)

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def ca_key_file(self) -> Path:
        return self.directory / "ca.key"

    def issue_server(self, node_id: str, hosts: tuple[str, ...] = ("127.0.0.1",)) -> Issued:
        """A server certificate for ``node_id``, valid for ``hosts`` and localhost."""
        names: list[x509.GeneralName] = [x509.DNSName("localhost")]
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        return self._issue(node_id, ExtendedKeyUsageOID.SERVER_AUTH,
                           x509.SubjectAlternativeName(names))

    def issue_client(self, user: str, groups: tuple[str, ...] = (),
                     valid_for: datetime.timedelta = VALIDITY) -> Issued:
        """A client certificate whose CN is ``user`` (and OUs ``groups``): the identity
        the server trusts, written to ``user-<user>.pem`` and ``.key`` here."""
        return self.make_client(user, groups, valid_for).write(self.directory)

    def make_client(self, user: str, groups: tuple[str, ...] = (),
                    valid_for: datetime.timedelta = USER_VALIDITY,
                    not_before: datetime.datetime | None = None) -> ClientCertificate:
        """A client certificate for ``user`` with one OU per group, valid for
        ``valid_for`` from ``not_before`` (default: now, less the clock skew); not written."""
        key = ec.generate_private_key(ec.SECP256R1())
        cert = self._sign(_name(user, groups), key, ExtendedKeyUsageOID.CLIENT_AUTH, None,
                          valid_for, not_before)
        return ClientCertificate(user, groups, cert, key)

    def _issue(self, common_name: str, usage: x509.ObjectIdentifier,
               names: x509.SubjectAlternativeName | None) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = self._sign(_name(common_name), key, usage, names)
        issued = Issued(self.directory / f"{common_name}.pem",
                        self.directory / f"{common_name}.key")
        _write_key(key, issued.key_file)
        _write_cert(cert, issued.cert_file)
        return issued

    def _sign(self, subject: x509.Name, key: PrivateKey, usage: x509.ObjectIdentifier,
              names: x509.SubjectAlternativeName | None,
              valid_for: datetime.timedelta = VALIDITY,
              not_before: datetime.datetime | None = None) -> x509.Certificate:
        builder = (_builder(subject, self.cert.subject, key, valid_for, not_before)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                                  critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if names is not None:
            builder = builder.add_extension(names, critical=False)
        return builder.sign(self.key, hashes.SHA256())
