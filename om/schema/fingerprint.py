"""What makes a retry the same request: a fingerprint of its body.

A client retries with the same (client id, call id) and must resend the same
request; the retry cache answers it with the original's stored response. A
request that reuses a call id for a *different* body (another key, size or
user, not only another command) must not get someone else's answer, so each
stored reply keeps the SHA-256 of the original's command type, user and body,
and a retry is answered only when its own fingerprint matches. Transport
fields (client id, call id, trace id, the read mode) are not part of it.
"""

from __future__ import annotations

import hashlib

from om.protocol import om_pb2


def fingerprint(request: om_pb2.OMRequest) -> bytes:
    """The request's fingerprint (32 bytes)."""
    digest = hashlib.sha256(request.cmd_type.to_bytes(4, "big"))
    user = request.user.encode()
    digest.update(len(user).to_bytes(4, "big") + user)
    body = request.WhichOneof("body")
    if body is not None:
        digest.update(getattr(request, body).SerializeToString(deterministic=True))
    return digest.digest()


def same_request(stored: bytes, request_fingerprint: bytes) -> bool:
    """True when a stored fingerprint matches (rows written before fingerprints
    existed have none: they match on the command type alone, checked apart)."""
    return not stored or stored == request_fingerprint
