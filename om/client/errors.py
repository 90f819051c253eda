"""Typed exceptions for non-OK statuses, named after Ozone's ResultCodes."""

from __future__ import annotations

from om.protocol import om_pb2


class OMClientError(Exception):
    """Base of every error the clients raise."""


class OMConnectionError(OMClientError):
    """No node answered before the deadline."""


class OMStatusError(OMClientError):
    """The OM answered with a non-OK status."""

    def __init__(self, response: om_pb2.OMResponse) -> None:
        self.response = response
        self.status = response.status
        self.status_name = om_pb2.Status.Name(response.status)
        self.message = response.message
        super().__init__(f"{self.status_name}: {self.message}")


class VolumeNotFound(OMStatusError):
    """VOLUME_NOT_FOUND"""


class VolumeNotEmpty(OMStatusError):
    """VOLUME_NOT_EMPTY"""


class VolumeAlreadyExists(OMStatusError):
    """VOLUME_ALREADY_EXISTS"""


class BucketNotFound(OMStatusError):
    """BUCKET_NOT_FOUND"""


class BucketNotEmpty(OMStatusError):
    """BUCKET_NOT_EMPTY"""


class BucketAlreadyExists(OMStatusError):
    """BUCKET_ALREADY_EXISTS"""


class KeyNotFound(OMStatusError):
    """KEY_NOT_FOUND"""


class KeyAlreadyExists(OMStatusError):
    """KEY_ALREADY_EXISTS"""


class InvalidName(OMStatusError):
    """INVALID_VOLUME_NAME, INVALID_BUCKET_NAME or INVALID_KEY_NAME"""


class QuotaExceeded(OMStatusError):
    """QUOTA_EXCEEDED"""


class QuotaError(OMStatusError):
    """QUOTA_ERROR: an invalid quota value or combination"""


class PermissionDenied(OMStatusError):
    """PERMISSION_DENIED"""


class InvalidRequest(OMStatusError):
    """INVALID_REQUEST"""


class TokenError(OMStatusError):
    """INVALID_TOKEN, TOKEN_EXPIRED, INVALID_AUTH_METHOD or TOKEN_CREATION_ERROR: a
    delegation token that does not stand, or one asked for the wrong way"""


class LockTimeout(OMStatusError):
    """TIMEOUT: a lock or an in-flight original took too long"""


class NotLeader(OMStatusError):
    """NOT_LEADER, LEADER_NOT_READY or SERVER_BUSY after the retry deadline"""


class InternalError(OMStatusError):
    """INTERNAL_ERROR or METADATA_ERROR"""


_BY_STATUS: dict[int, type[OMStatusError]] = {
    om_pb2.VOLUME_NOT_FOUND: VolumeNotFound,
    om_pb2.VOLUME_NOT_EMPTY: VolumeNotEmpty,
    om_pb2.VOLUME_ALREADY_EXISTS: VolumeAlreadyExists,
    om_pb2.BUCKET_NOT_FOUND: BucketNotFound,
    om_pb2.BUCKET_NOT_EMPTY: BucketNotEmpty,
    om_pb2.BUCKET_ALREADY_EXISTS: BucketAlreadyExists,
    om_pb2.KEY_NOT_FOUND: KeyNotFound,
    om_pb2.KEY_ALREADY_EXISTS: KeyAlreadyExists,
    om_pb2.INVALID_VOLUME_NAME: InvalidName,
    om_pb2.INVALID_BUCKET_NAME: InvalidName,
    om_pb2.INVALID_KEY_NAME: InvalidName,
    om_pb2.QUOTA_EXCEEDED: QuotaExceeded,
    om_pb2.QUOTA_ERROR: QuotaError,
    om_pb2.PERMISSION_DENIED: PermissionDenied,
    om_pb2.INVALID_REQUEST: InvalidRequest,
    om_pb2.INVALID_TOKEN: TokenError,
    om_pb2.TOKEN_EXPIRED: TokenError,
    om_pb2.INVALID_AUTH_METHOD: TokenError,
    om_pb2.TOKEN_CREATION_ERROR: TokenError,
    om_pb2.TIMEOUT: LockTimeout,
    om_pb2.NOT_LEADER: NotLeader,
    om_pb2.LEADER_NOT_READY: NotLeader,
    om_pb2.SERVER_BUSY: NotLeader,
    om_pb2.INTERNAL_ERROR: InternalError,
    om_pb2.METADATA_ERROR: InternalError,
}


def error_for(response: om_pb2.OMResponse) -> OMStatusError:
    """The typed exception for a non-OK response."""
    assert response.status != om_pb2.OK
    return _BY_STATUS.get(response.status, OMStatusError)(response)
