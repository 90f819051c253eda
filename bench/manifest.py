"""``manifest.json``: what was run, where and with what, so a run can be reproduced.

Holds the git revision (when git can tell), the command line, the profile,
every flow's configuration (execution, extra TOML, the cluster's TOML file),
the machine (CPU count, memory, Python, platform) and package versions.
``write_json`` replaces a file atomically, so a reader never sees half of one.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path
from typing import Any

from bench.machine import git_revision, machine, versions

REPO = Path(__file__).resolve().parent.parent


def build_manifest(run: dict[str, Any], flows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The manifest of a run described by ``run`` (profile, keys, ...) and ``flows``."""
    return {
        "tool": "om bench",
        "created_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": sys.argv,
        "git": git_revision(REPO),
        **run,
        "flows": flows,
        "machine": machine(),
        "versions": versions(),
    }


def write_json(path: Path, value: dict[str, Any]) -> None:
    """Writes ``value`` as indented JSON, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(value, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    temporary.replace(path)
