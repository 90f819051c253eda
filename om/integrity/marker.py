"""The replica marker: a file beside the database that keeps a diverged node out.

CockroachDB, when a consistency check finds a replica in the minority, writes
a prevent-startup file so that a restart cannot bring the bad replica back.
This is ours, ``<node data dir>/replica-marker.json``. Its states:

* ``diverged``: ``om admin verify`` outvoted this node at ``position`` in
  ``tables``. The node runs (it applies and votes, so a 3-node cluster keeps
  its spare replica for quorum), but answers every client request with
  REPLICA_DIVERGED and hands leadership away.
* ``halted``: a repair made the node stop right after applying the verify entry
  at ``position``, so its database holds exactly that position. The node
  refuses to start (``ReplicaHalted``) until the repair clears the marker.
* ``repairing``: a repair is writing ranges into the stopped node's database;
  ``repaired`` counts the ranges written, ``unrepairable`` names the ranges no
  healthy peer could supply and why. Still refuses to start.

Only a repair that re-verified the whole database against the majority's roots
removes the file (``clear``). Every write is atomic and durable (a temporary
file, fsync, rename, fsync of the directory), so a crash leaves the old state
or the new one, never none: the node stays out and repairable.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from om.disk.durable_files import fsync_path, write_synced

_WRITING = threading.Lock()   # one marker write at a time in this process (save)

MARKER_FILE = "replica-marker.json"
State = Literal["diverged", "halted", "repairing"]
DIVERGED: State = "diverged"
HALTED: State = "halted"
REPAIRING: State = "repairing"
STATES = (DIVERGED, HALTED, REPAIRING)


class ReplicaHalted(Exception):
    """The node must not start: a repair holds it (the marker says halted or repairing)."""


@dataclass(frozen=True)
class Marker:
    """What the marker file holds."""

    state: State
    position: int                       # the verify position the state refers to
    tables: tuple[str, ...] = ()        # where the node differed from the majority
    detected_at: int = 0                # the verification that found it
    since: str = ""                     # wall time of the last change, for people
    repaired: int = 0                   # ranges written so far (repairing)
    unrepairable: tuple[str, ...] = ()  # why the last repair could not finish
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert self.state in STATES
        assert self.position > 0

    @property
    def stops_start(self) -> bool:
        """Whether a node with this marker must refuse to start."""
        return self.state != DIVERGED

    def moved(self, state: State, **changes: Any) -> Marker:
        """The marker in ``state`` with ``changes``, stamped now."""
        return replace(self, state=state, since=_now(), **changes)


def marker_path(node_dir: Path) -> Path:
    """Where the marker of the node whose data directory is ``node_dir`` lives."""
    return node_dir / MARKER_FILE


def load(node_dir: Path) -> Marker | None:
    """The node's marker, or None when it has none.

    A file that does not parse is a marker too (reading it as "none" would let
    a bad replica serve): ReplicaHalted, so the node does not start and
    someone looks.
    """
    path = marker_path(node_dir)
    try:
        raw = json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError):
        return None   # no marker (or no data directory: opening the store will say so)
    except (OSError, ValueError) as error:
        raise ReplicaHalted(f"the replica marker {path} is unreadable ({error}): inspect it; "
                            "remove it only for a node known to be good") from None
    if not isinstance(raw, dict) or raw.get("state") not in STATES \
            or not isinstance(raw.get("position"), int) or raw["position"] <= 0:
        raise ReplicaHalted(f"the replica marker {path} holds no valid state and position: "
                            "inspect it; remove it only for a node known to be good")
    return Marker(state=raw["state"], position=raw["position"],
                  tables=tuple(raw.get("tables", ())), detected_at=int(raw.get("detected_at", 0)),
                  since=str(raw.get("since", "")), repaired=int(raw.get("repaired", 0)),
                  unrepairable=tuple(raw.get("unrepairable", ())),
                  extra=dict(raw.get("extra", {})))


def save(node_dir: Path, marker: Marker) -> None:
    """Writes ``marker`` atomically and durably. Writers in one process take turns
    (``_WRITING``): the continuous self-check (a thread) and an ``om admin verify``'s
    MarkDiverged (the loop) may mark a node at the same moment, and two writers of one
    temporary file would rename it from under each other (a CI run's MarkDiverged
    failed so, and the node went unmarked)."""
    body = asdict(marker)
    body["since"] = marker.since or _now()
    data = (json.dumps(body, indent=2, sort_keys=True) + "\n").encode()
    with _WRITING:
        write_synced(marker_path(node_dir), data)


def clear(node_dir: Path) -> None:
    """Removes the marker, durably: the node may serve again."""
    with _WRITING:
        marker_path(node_dir).unlink(missing_ok=True)
        fsync_path(node_dir)


def halted_message(node_id: str, marker: Marker, node_dir: Path) -> str:
    """Why a node does not start, and what to run."""
    return (f"node {node_id} is stopped for repair at log position {marker.position} "
            f"(marker {marker.state}, {marker_path(node_dir)}): it must not apply anything "
            f"past that position until `om admin repair --node-id {node_id}` has repaired it")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


