"""What the nodes' logs say went wrong during a chaos run: every traceback and every
ERROR or CRITICAL line, counted and sampled per node.

The checkers judge the data (lost, duplicated or stale writes); a node can still
misbehave without losing any: a scrape that raised, a self-check that asserted, an
alert that should not have fired. A 2-hour soak found three such bugs only by
reading the logs by hand (CHANGELOG). The runner puts this summary in the run's
result (``node_logs``) so that every run says it, with samples to start from.

Bounded: each log is read line by line, at most ``SAMPLES_MAX`` distinct messages
kept per node.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

SAMPLES_MAX = 20
# "2026-12-01 22:24:22,028 ERROR om.integrity.continuous: ALERT ...": the format
# `om serve` logs in (om/cli/serve.py)
LEVEL = re.compile(r"^\S+ \S+ (ERROR|CRITICAL) (.*)$")
TRACEBACK = "Traceback (most recent call last):"
MESSAGE_CHARS = 160


def summarize(directory: Path) -> dict[str, Any]:
    """Per node log (``<node>.log`` in the cluster's directory): counts of tracebacks,
    ERROR and CRITICAL lines, and the distinct messages (first ``MESSAGE_CHARS``
    characters, the last frame's line for a traceback) with their counts."""
    nodes: dict[str, Any] = {}
    for log in sorted(directory.glob("*.log")):
        counts: Counter[str] = Counter()
        messages: Counter[str] = Counter()
        in_traceback = False
        with log.open(errors="replace") as lines:
            for line in lines:
                line = line.rstrip("\n")
                if line.startswith(TRACEBACK):
                    counts["tracebacks"] += 1
                    in_traceback = True
                    continue
                if in_traceback and not line.startswith((" ", "\t")):
                    _keep(messages, f"traceback: {line}")   # the exception's own line
                    in_traceback = False
                found = LEVEL.match(line)
                if found:
                    counts[found.group(1).lower()] += 1
                    _keep(messages, f"{found.group(1)} {found.group(2)}")
        if counts:
            nodes[log.stem] = {**counts, "messages": dict(messages.most_common())}
    return nodes


def _keep(messages: Counter[str], message: str) -> None:
    message = message[:MESSAGE_CHARS]
    if message in messages or len(messages) < SAMPLES_MAX:
        messages[message] += 1
