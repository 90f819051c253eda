"""Delegation tokens as they travel and as files hold them: their kind and bounds, the
identifier's shape, the text a token file holds, and how a token prints.

One model for the shell, the client and the OM, so a token reads the same everywhere.
A token (``TokenProto``) is an identifier (``OMTokenProto``: owner, renewer, real
user, issue date, max date, sequence number, master key id) and its password; only
the OM can check the password, and its rules (issue, renew, cancel, verify) are
``om/executor/security/tokens.py``. Everything here is pure and needs no secret:

* ``identifier_of`` parses the identifier and checks its shape, nothing more;
* a token file holds one line of base64url of the token's bytes (``encode_token``,
  ``decode_token``), at most ``TOKEN_MAX_BYTES`` characters;
* ``describe`` and ``token_string`` print as Ozone's and Hadoop's ``toString`` do.

A token that is not a well-formed delegation token raises ``TokenFormatError``.
"""

from __future__ import annotations

import base64
import binascii
import datetime

from google.protobuf.message import DecodeError

from om.protocol import om_pb2

KIND = "OzoneToken"                 # Ozone's OzoneTokenIdentifier.KIND_NAME
VERSION = 1
IDENTIFIER_MAX_BYTES = 1024
TOKEN_MAX_BYTES = 4096              # a whole TokenProto, and a token file's text


class TokenFormatError(ValueError):
    """A token, token file or token string that does not hold a well-formed delegation
    token."""


def identifier_of(token: om_pb2.TokenProto) -> om_pb2.OMTokenProto:
    """The token's identifier, parsed and shape-checked (not yet verified)."""
    if token.kind != KIND:
        raise TokenFormatError(f"not an {KIND} delegation token (kind {token.kind!r})")
    if not 0 < len(token.identifier) <= IDENTIFIER_MAX_BYTES:
        raise TokenFormatError(f"a token identifier is 1 to {IDENTIFIER_MAX_BYTES} bytes, "
                               f"not {len(token.identifier)}")
    try:
        identifier = om_pb2.OMTokenProto.FromString(token.identifier)
    except DecodeError:
        raise TokenFormatError("malformed token identifier") from None
    if identifier.type != om_pb2.OMTokenProto.DELEGATION_TOKEN or not identifier.owner:
        raise TokenFormatError("the token identifier is not a delegation token with an owner")
    return identifier


def instant(ms: int) -> str:
    """A time as Java's ``Instant`` prints it: 2026-11-23T00:15:40.649Z (a time no
    calendar holds, as a forged token may carry: its milliseconds)."""
    try:
        moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    except (OverflowError, ValueError, OSError):
        return f"{ms} ms"
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def describe(identifier: om_pb2.OMTokenProto) -> str:
    """The identifier as Ozone's ``OzoneTokenIdentifier.toString`` prints it (the
    fields a delegation token has)."""
    return (f"{KIND} owner={identifier.owner}, renewer={identifier.renewer}, "
            f"realUser={identifier.real_user}, issueDate={instant(identifier.issue_date)}, "
            f"maxDate={instant(identifier.max_date)}, "
            f"sequenceNumber={identifier.sequence_number}, "
            f"masterKeyId={identifier.master_key_id}")


def token_string(token: om_pb2.TokenProto) -> str:
    """The token as Hadoop's ``Token.toString`` prints it (``om sh token print``)."""
    try:
        ident = describe(identifier_of(token))
    except TokenFormatError as error:
        ident = f"unreadable: {error}"
    return f"Kind: {token.kind}, Service: {token.service}, Ident: ({ident})"


# ------------------------------------------------------------------ token files ---

def encode_token(token: om_pb2.TokenProto) -> str:
    """The token as a token file holds it: base64url of its bytes (Hadoop's
    ``Token.encodeToUrlString`` does the same with its own serialization)."""
    return base64.urlsafe_b64encode(token.SerializeToString(deterministic=True)).decode()


def decode_token(text: str) -> om_pb2.TokenProto:
    """The token ``encode_token`` wrote; TokenFormatError for anything else."""
    text = text.strip()
    if not text or len(text) > TOKEN_MAX_BYTES:
        raise TokenFormatError(f"a token is 1 to {TOKEN_MAX_BYTES} characters of base64url, "
                               f"not {len(text)}")
    try:
        raw = base64.urlsafe_b64decode(text.encode("ascii"))
        token = om_pb2.TokenProto.FromString(raw)
    except (ValueError, binascii.Error, DecodeError):
        raise TokenFormatError("not a token: expected the base64url text `om sh token get` "
                               "writes") from None
    if token.kind != KIND or not token.identifier:
        raise TokenFormatError(f"not an {KIND} delegation token (kind {token.kind!r})")
    return token
