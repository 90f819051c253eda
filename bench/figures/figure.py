"""What a figure is to the command line: a name, its arguments, and a run."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Figure:
    """One figure of ``python -m bench.figures``: ``run`` prints its JSON and returns
    the exit status."""

    name: str
    summary: str
    description: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


def database_dir(text: str) -> Path:
    """A RocksDB database directory (``om freon generate`` writes one to DATA_DIR/db;
    ``om bench --keys N`` leaves one in OUT/seed/db)."""
    path = Path(text)
    if not (path / "CURRENT").is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a RocksDB database (no CURRENT file)")
    return path
