"""A cluster's own certificate authority, and the certificates it issues.

``om cluster up`` (by default) makes a CA (EC P-256, ten years), one server
certificate per node (subject CN = the node id, SAN 127.0.0.1 and localhost)
and one client certificate per user (subject CN = the user name), with the
``cryptography`` package. Private keys are written with mode 0600 and never
leave the cluster directory. The user a client acts as is its certificate's
CN: that is what the server trusts, never a field the client fills in.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=3650)
PrivateKey = ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class Issued:
    """Where one certificate and its key were written."""

    cert_file: Path
    key_file: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "om"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: PrivateKey, path: Path) -> None:
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(pem)


def _write_cert(cert: x509.Certificate, path: Path) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _builder(subject: x509.Name, issuer: x509.Name, key: PrivateKey) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY))


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

    def issue_client(self, user: str) -> Issued:
        """A client certificate whose CN is ``user``: the identity the server trusts."""
        return self._issue(user, ExtendedKeyUsageOID.CLIENT_AUTH, None, f"user-{user}")

    def _issue(self, common_name: str, usage: x509.ObjectIdentifier,
               names: x509.SubjectAlternativeName | None, stem: str = "") -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (_builder(_name(common_name), self.cert.subject, key)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                                  critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if names is not None:
            builder = builder.add_extension(names, critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        issued = Issued(self.directory / f"{stem or common_name}.pem",
                        self.directory / f"{stem or common_name}.key")
        _write_key(key, issued.key_file)
        _write_cert(cert, issued.cert_file)
        return issued
