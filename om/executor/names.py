"""Ozone's name rules for volumes, buckets and keys, as pure checks.

Volume and bucket names follow Ozone's ``OmUtils.validateName`` (S3 bucket
rules): 3 to 63 characters of lowercase letters, digits, '-' and '.'; they
start and end with a letter or digit; no '..', '.-' or '-.'; not all digits and dots
(which covers IPv4 addresses). Key names in an object-store bucket are any non-empty string of at
most ``Limits.key_name_max_bytes`` bytes without control characters.

Each function says why a name breaks the rules, or None when it keeps them; the
gate (``om/gatekeeper/validation.py``) turns that into Ozone's status.
"""

from __future__ import annotations

import re

NAME_MAX_CHARS = 63
_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")      # fullmatch: no "\n" at the end
_NAME_CHARS = re.compile(r"[a-z0-9.-]*")
_NUMERIC = re.compile(r"[0-9.]+")
# Every rule below at once, for the common case of a valid name (one regex call).
_VALID_NAME = re.compile(r"(?![0-9.]+\Z)(?!.*(?:\.\.|\.-|-\.))[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid volume or bucket name, or None."""
    if _VALID_NAME.fullmatch(name):
        return None
    if not 3 <= len(name) <= NAME_MAX_CHARS:
        return "must be 3 to 63 characters long"
    if not _NAME.fullmatch(name):
        return "may hold only lowercase letters, digits, '-' and '.', and must start and end " \
               "with a letter or digit"
    for bad in ("..", ".-", "-."):
        if bad in name:
            return f"must not contain '{bad}'"
    assert _NUMERIC.fullmatch(name), "the rules above and _VALID_NAME agree"
    return "must not be an IPv4 address or all numeric"


def name_part_problem(text: str) -> str | None:
    """Why ``text`` cannot be part of a volume or bucket name (a listing's prefix or
    start), or None: at most 63 of the characters a name may hold."""
    if len(text) > NAME_MAX_CHARS or not _NAME_CHARS.fullmatch(text):
        return "at most 63 lowercase letters, digits, '-' and '.', as names hold"
    return None


def key_name_problem(name: str, max_bytes: int) -> str | None:
    """Why ``name`` is not a valid object-store key name, or None."""
    if not name:
        return "must not be empty"
    return key_part_problem(name, max_bytes)


def key_part_problem(text: str, max_bytes: int) -> str | None:
    """Why ``text`` cannot be part of a key name (a listing's prefix or start), or None."""
    assert max_bytes > 0
    if len(text) * 4 > max_bytes and len(text.encode()) > max_bytes:
        return f"longer than {max_bytes} bytes"
    if _CONTROL.search(text):
        return "must not contain control characters"
    return None
