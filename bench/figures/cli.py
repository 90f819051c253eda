"""``python -m bench.figures FIGURE [ARGS]``: the figures behind docs/, one command each."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from bench.figures import (
    core_cpu,
    docs,
    integrity,
    repair_scale,
    scale,
    snapshot_latency,
    wipe_catch_up,
)
from bench.figures.figure import Figure

FIGURES: tuple[Figure, ...] = (integrity.FIGURE, scale.FIGURE, wipe_catch_up.FIGURE,
                                core_cpu.FIGURE, snapshot_latency.FIGURE, repair_scale.FIGURE,
                                docs.FIGURE)


def build_parser(figures: Sequence[Figure] = FIGURES) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.figures",
        description="The figures behind docs/: each starts its own local cluster(s) or "
                    "in-process node, measures, and prints JSON. Run nothing else meanwhile.")
    commands = parser.add_subparsers(dest="figure", metavar="FIGURE", required=True)
    for figure in figures:
        sub = commands.add_parser(figure.name, help=figure.summary,
                                  description=figure.description,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        figure.add_arguments(sub)
        sub.set_defaults(run=figure.run)
    return parser


def main(argv: Sequence[str] | None = None, figures: Sequence[Figure] = FIGURES) -> int:
    """Parses the command line (exit 2 on a usage error) and runs the figure named."""
    args = build_parser(figures).parse_args(argv)
    status: int = args.run(args)
    return status
