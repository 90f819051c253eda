"""Finding the inputs: run directories, their trace files and their manifests.

This module does plain file-system work and needs no Spark, so the command line can
reject a wrong directory before a JVM starts.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Where the trace files of one flow live inside a run directory (docs/TRACES.md).
TRACE_GLOB = "*/traces/*.jsonl"


@dataclass(frozen=True)
class RunInput:
    """One run directory as the analysis sees it.

    `label` names the run in every table and is unique among the runs of one analysis;
    `files` are the run's trace files, sorted; `manifest` is the parsed manifest.json and
    `bench_summary` the parsed summary.json `om bench` wrote (its CPU and memory records),
    each when it exists and holds a JSON object, else None.
    """

    label: str
    path: Path
    files: tuple[Path, ...]
    manifest: dict[str, Any] | None
    bench_summary: dict[str, Any] | None


def discover(run_dirs: Sequence[Path]) -> list[RunInput]:
    """Describe each run directory, in the order given.

    Labels are the directories' base names, or their full resolved paths when two base
    names collide. Raises NotADirectoryError for a path that is not a directory.
    """
    resolved = [Path(run_dir).resolve() for run_dir in run_dirs]
    for path in resolved:
        if not path.is_dir():
            raise NotADirectoryError(f"{path} is not a directory")
    names = Counter(path.name for path in resolved)
    unique = all(count == 1 for count in names.values())
    return [
        RunInput(
            label=path.name if unique else str(path),
            path=path,
            files=tuple(sorted(path.glob(TRACE_GLOB))),
            manifest=_read_json_object(path / "manifest.json"),
            bench_summary=_read_json_object(path / "summary.json"),
        )
        for path in resolved
    ]


def _read_json_object(path: Path) -> dict[str, Any] | None:
    """The file's JSON object as a dict, or None when it is absent, unreadable or not one."""
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return found if isinstance(found, dict) else None
