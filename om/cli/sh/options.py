"""Values of ``om sh`` options, checked as Ozone's shell checks them, and its errors.

Two kinds of failure, with Ozone's exit codes: a malformed command line
(UsageError, exit 2, as picocli's usage errors) and a command that cannot be
done (ShellError, exit 255: Ozone's shell exits -1 on any execution error,
a bad quota value included).
"""

from __future__ import annotations

import re

# OzoneQuota.Units, longest suffix first: "10GB" must not read as "10G" + "B".
_UNITS = {"EB": 1 << 60, "PB": 1 << 50, "TB": 1 << 40, "GB": 1 << 30, "MB": 1 << 20,
          "KB": 1 << 10, "B": 1}
_LONG = re.compile(r"^[+-]?\d+$")
_INT64_MAX = (1 << 63) - 1
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGTPE]?B?)\s*$", re.IGNORECASE)


class UsageError(Exception):
    """The command line is malformed: exit 2."""


class ShellError(Exception):
    """The command cannot be carried out: the message is printed as is, exit 255."""


class NotSupported(ShellError):
    """Ozone has the command or option; om cannot do it (it stores metadata only)."""

    def __init__(self, what: str) -> None:
        super().__init__(f"not supported: {what}")


def metadata_only(command: str) -> NotSupported:
    """The error for a command that needs the data blocks om does not store."""
    return NotSupported(f"metadata only: '{command}' needs the key's data blocks, and om "
                        "stores only metadata (there are no datanodes)")


def parse_space_quota(text: str) -> int:
    """Bytes from "10GB", "1 tb", "1024", as OzoneQuota.parseSpaceQuota reads them."""
    upper = re.sub(r"\s+", "", text.upper())
    number, unit = upper, 1
    for name, size in _UNITS.items():
        if upper.endswith(name):
            number, unit = upper[: -len(name)], size
            break
    if not _LONG.match(number):
        raise ShellError(f"{text} is invalid. The quota value should be a positive integer "
                         "with byte numeration(B, KB, MB, GB and TB)")
    value = int(number)
    if value <= 0:
        raise ShellError(f"Invalid value for space quota: {value}")
    if value * unit > _INT64_MAX:
        raise ShellError(f"{text} is invalid: more than {_INT64_MAX} bytes")
    return value * unit


def parse_namespace_quota(text: str) -> int:
    """A count from "100", as OzoneQuota.parseNameSpaceQuota reads it."""
    if not _LONG.match(text.strip()):
        raise ShellError(f"{text} is invalid. The quota value should be a positive integer")
    value = int(text)
    if value <= 0:
        raise ShellError(f"Invalid value for namespace quota: {value}")
    if value > _INT64_MAX:
        raise ShellError(f"{text} is invalid: more than {_INT64_MAX}")
    return value


def parse_size(text: str) -> int:
    """Bytes from "0", "1024", "10GB", "5 MB" for ``key put --size`` (om's own option)."""
    match = _SIZE.match(text)
    if match is None:
        raise UsageError(f"invalid size '{text}': use a number with an optional unit "
                         "B/KB/MB/GB/TB/PB/EB")
    unit = match.group(2).upper()
    if unit and not unit.endswith("B"):
        unit += "B"
    return int(match.group(1)) * _UNITS[unit or "B"]


def list_limit(length: int, all_items: bool) -> int | None:
    """How many entries a list prints: None for ``--all``, else ``--length`` (at least 1)."""
    if all_items:
        return None
    if length < 1:
        raise ShellError("List length should be a positive number")
    return length
