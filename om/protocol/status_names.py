"""Status names by number, read once from the enum.

``om_pb2.Status.Name`` walks the enum's descriptor on every call (about a
microsecond); the request path names every answer's status three times
(metrics, audit, trace), so it reads this dict instead. An unknown number
(a newer peer's) is named by ``status_name``, never a KeyError.
"""

from __future__ import annotations

from om.protocol import om_pb2

STATUS_NAMES: dict[int, str] = {number: name for name, number in om_pb2.Status.items()}


def status_name(status: int) -> str:
    """The status's name, e.g. ``KEY_NOT_FOUND`` (its number when unknown)."""
    name = STATUS_NAMES.get(status)
    return name if name is not None else str(status)
