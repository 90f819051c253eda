"""The ring as ``cluster.toml`` records it, kept true after every membership change.

``om cluster up`` writes one ``[[nodes]]`` block per node; ``om admin om add``,
``decommission`` and ``maintenance`` edit those blocks here (add one, set a
field in one, drop one) and the top-level ``decommissioned`` list, so that
``om cluster down`` / ``up`` restores the current ring, and every node started
later is told the current one. Each edit writes a new file and renames it over
the old one (a crash leaves the old ring or the new one, never half), then
loads it back (an edit that makes the file invalid raises and is not kept).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from om import config as om_config
from om.config import NodeAddress, ServerConfig

_BLOCK = re.compile(r"\[\[nodes\]\]\n(?:(?!\[).*\n)*")


def add_node(path: Path, node: NodeAddress, learner: bool) -> ServerConfig:
    """Appends ``node``'s block (a learner, or a voter)."""
    lines = ["", "[[nodes]]", f'id = "{node.id}"', f'host = "{node.host}"',
             f"port = {node.port}", f"raft_port = {node.raft_port}",
             f"http_port = {node.http_port}"]
    if learner:
        lines.append("learner = true")
    return _write(path, path.read_text().rstrip("\n") + "\n" + "\n".join(lines) + "\n")


def set_fields(path: Path, node_id: str, **fields: bool | float) -> ServerConfig:
    """Sets (or, with a false or zero value, removes) ``fields`` in ``node_id``'s block."""
    text = path.read_text()
    block = _block(text, node_id)
    edited = block
    for name, value in fields.items():
        edited = re.sub(rf"^{name} = .*\n", "", edited, flags=re.MULTILINE)
        if value:
            rendered = "true" if value is True else repr(float(value))
            edited = edited.rstrip("\n") + f"\n{name} = {rendered}\n"
    return _write(path, text.replace(block, edited, 1))


def remove_node(path: Path, node_id: str) -> ServerConfig:
    """Drops ``node_id``'s block (a learner that never became a voter)."""
    text = path.read_text()
    return _write(path, text.replace(_block(text, node_id), "", 1))


def decommission(path: Path, node_id: str) -> ServerConfig:
    """Drops ``node_id``'s block and adds it to the top-level ``decommissioned`` list."""
    text = path.read_text()
    text = text.replace(_block(text, node_id), "", 1)
    before = om_config.load(path).decommissioned
    listed = ", ".join(f'"{n}"' for n in (*before, node_id))
    line = f"decommissioned = [{listed}]\n"
    if re.search(r"^decommissioned = .*\n", text, flags=re.MULTILINE):
        text = re.sub(r"^decommissioned = .*\n", line, text, count=1, flags=re.MULTILINE)
    else:
        text = line + text
    return _write(path, text)


def _block(text: str, node_id: str) -> str:
    for match in _BLOCK.finditer(text):
        if re.search(rf'^id = "{re.escape(node_id)}"$', match.group(0), flags=re.MULTILINE):
            return match.group(0)
    raise om_config.ConfigError(f"no [[nodes]] block with id {node_id!r}")


def _write(path: Path, text: str) -> ServerConfig:
    """Replaces ``path`` with ``text`` atomically once it loads as a valid ring."""
    staged = path.with_name(path.name + ".new")
    staged.write_text(text)
    try:
        loaded = om_config.load(staged, node_id=om_config.load(staged).nodes[0].id)
    except om_config.ConfigError:
        staged.unlink()
        raise
    with staged.open("rb") as file:
        os.fsync(file.fileno())
    os.replace(staged, path)
    return loaded
