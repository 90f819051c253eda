"""Ozone's name rules for volumes, buckets and keys.

Volume and bucket names follow Ozone's ``OmUtils.validateName`` (S3 bucket
rules): 3 to 63 characters of lowercase letters, digits, '-' and '.'; they
start and end with a letter or digit; no '..', '.-' or '-.'; not all digits and dots
(which covers IPv4 addresses). Key names in an object-store bucket are any non-empty string of at
most ``Limits.key_name_max_bytes`` bytes without control characters.
"""

from __future__ import annotations

import re

from om.executor.errors import OMError
from om.protocol import om_pb2

_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_NUMERIC = re.compile(r"^[0-9.]+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _name_problem(name: str) -> str | None:
    if not 3 <= len(name) <= 63:
        return "must be 3 to 63 characters long"
    if not _NAME.match(name):
        return "may hold only lowercase letters, digits, '-' and '.', and must start and end " \
               "with a letter or digit"
    for bad in ("..", ".-", "-."):
        if bad in name:
            return f"must not contain '{bad}'"
    if _NUMERIC.match(name):
        return "must not be an IPv4 address or all numeric"
    return None


def check_volume_name(name: str) -> None:
    """Raises INVALID_VOLUME_NAME unless ``name`` is a valid volume name."""
    problem = _name_problem(name)
    if problem is not None:
        raise OMError(om_pb2.INVALID_VOLUME_NAME, f"Invalid volume name '{name}': {problem}")


def check_bucket_name(name: str) -> None:
    """Raises INVALID_BUCKET_NAME unless ``name`` is a valid bucket name."""
    problem = _name_problem(name)
    if problem is not None:
        raise OMError(om_pb2.INVALID_BUCKET_NAME, f"Invalid bucket name '{name}': {problem}")


def check_key_name(name: str, max_bytes: int) -> None:
    """Raises INVALID_KEY_NAME unless ``name`` is a valid object-store key name."""
    assert max_bytes > 0
    if not name:
        raise OMError(om_pb2.INVALID_KEY_NAME, "Invalid key name: must not be empty")
    if len(name.encode()) > max_bytes:
        raise OMError(om_pb2.INVALID_KEY_NAME,
                      f"Invalid key name: longer than {max_bytes} bytes")
    if _CONTROL.search(name):
        raise OMError(om_pb2.INVALID_KEY_NAME,
                      "Invalid key name: must not contain control characters")
