"""What a client needs to act with a delegation token instead of a certificate.

* The token file: ``om sh token get -t FILE`` writes the token as one line of
  base64url (``token_format.encode_token``) with mode 0600, as Ozone's shell makes
  its token file readable by its owner only; ``read_token_file`` reads it back,
  refusing a file over ``token_format.TOKEN_MAX_BYTES`` or one that holds no token.
* ``ServerTrust``: TLS that verifies the OM against the cluster's CA and
  presents no certificate; each request then carries the token
  (``OMRequest.token``) and the server takes its owner as the user.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from om.protocol import om_pb2, token_format


@dataclass(frozen=True)
class ServerTrust:
    """TLS that trusts the cluster's CA and presents no client certificate."""

    ca_file: Path

    def context(self) -> ssl.SSLContext:
        """A client context that verifies the server against the CA."""
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(self.ca_file))
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context


def write_token_file(path: Path, token: om_pb2.TokenProto) -> None:
    """Writes ``token`` to ``path`` (replacing it), readable by its owner only."""
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(token_format.encode_token(token) + "\n")


def read_token_file(path: Path) -> om_pb2.TokenProto:
    """The token in ``path``; OSError when it cannot be read, TokenFormatError when it
    holds no token."""
    with path.open("rb") as file:
        raw = file.read(token_format.TOKEN_MAX_BYTES + 1)
    if len(raw) > token_format.TOKEN_MAX_BYTES:
        raise token_format.TokenFormatError(f"{path} is larger than a token file "
                                      f"({token_format.TOKEN_MAX_BYTES} bytes at most)")
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise token_format.TokenFormatError(f"{path} does not hold a token (not text)") from None
    return token_format.decode_token(text)
