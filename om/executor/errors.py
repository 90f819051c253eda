"""The error a handler raises to end a request with a non-OK status."""

from __future__ import annotations

from om.protocol import om_pb2


class OMError(Exception):
    """A user-caused error: ends the request with ``status`` and ``message``.

    Raised only for conditions a client can cause (missing volume, bad name,
    quota); a broken invariant is an ``assert`` instead.
    """

    def __init__(self, status: om_pb2.Status.ValueType, message: str) -> None:
        assert status not in (om_pb2.OK, om_pb2.STATUS_UNSPECIFIED)
        super().__init__(message)
        self.status = status
        self.message = message
