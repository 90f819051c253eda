"""The core reads time and randomness only through its ``Seam`` (issue 34: one clock and
one source of randomness passed in at the seam, so a simulator can drive a node).

Reads the syntax tree of every module of the core (``CORE``) and reports each
reference to a function that reads the machine's clock or entropy (``READS``), whether
called, passed on or bound as a default, and each ``from`` import of one; a name bound
by ``import x as y`` is followed. ``ALLOWED`` lists the exceptions, each with the
function it sits in and why it is not the core's business. Red cases: a planted module
with every form is reported in full, one with none of them is not, an allowed read is
allowed in its own function only, and an allowed read that is gone fails the check (the
list stays exact).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE = ("om/flows", "om/executor", "om/gatekeeper", "om/statemachine", "om/schema")
# what reads the machine's clock or entropy, by dotted name; a module named alone: any
# name in it (random's functions share one unseeded generator, and its classes make
# generators of their own; secrets is os.urandom)
READS = frozenset({
    *(f"time.{name}{ns}" for name in ("time", "monotonic", "perf_counter", "process_time",
                                      "thread_time", "clock_gettime") for ns in ("", "_ns")),
    "random", "secrets", "uuid.uuid1", "uuid.uuid4", "os.urandom", "os.getrandom",
    "datetime.datetime.now", "datetime.datetime.utcnow", "datetime.datetime.today",
    "datetime.date.today",
})
LOGGED_DURATION = ("a Raft snapshot's write or download, timed for its log line once the "
                   "work is done: it decides nothing, is neither replicated nor stored, and "
                   "the simulator takes no Raft snapshots")
GAUGED_DURATION = ("an OM snapshot's checkpoint, timed for its log line and the "
                   "snapshot_checkpoint_seconds gauge after apply: it decides nothing and is "
                   "neither replicated nor stored (the simulator's nodes keep no OM snapshots)")
# (module, function, read) -> why it is not the core's business
ALLOWED: dict[tuple[str, str, str], str] = {
    ("om/statemachine/raft_snapshot.py", "Snapshotter.serialize", "time.perf_counter"):
        LOGGED_DURATION,
    ("om/statemachine/raft_snapshot.py", "Snapshotter._download", "time.perf_counter"):
        LOGGED_DURATION,
    ("om/statemachine/om_snapshot_checkpoints.py", "SnapshotCheckpoints._take",
     "time.perf_counter"): GAUGED_DURATION,
}


@dataclass(frozen=True)
class Read:
    """One read of the machine's clock or entropy in a module."""

    module: str
    line: int
    function: str   # qualified: Class.method, or <module>
    name: str       # dotted: time.perf_counter

    def key(self) -> tuple[str, str, str]:
        return (self.module, self.function, self.name)


def _reads(name: str) -> bool:
    return name in READS or any(name.startswith(f"{read}.") for read in READS)


class _Finder(ast.NodeVisitor):
    """Collects the reads of one module, following what its imports bind."""

    def __init__(self, module: str) -> None:
        self.module = module
        self.bound: dict[str, str] = {}     # local name -> the dotted name it stands for
        self.scope: list[str] = []
        self.found: list[Read] = []

    def _add(self, node: ast.AST, name: str) -> None:
        if _reads(name):
            self.found.append(Read(self.module, getattr(node, "lineno", 0),
                                   ".".join(self.scope) or "<module>", name))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname:
                self.bound[alias.asname] = alias.name
            else:
                top = alias.name.split(".")[0]
                self.bound[top] = top

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            dotted = f"{node.module}.{alias.name}"
            self.bound[alias.asname or alias.name] = dotted
            self._add(node, dotted)

    def _scoped(self, node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_ClassDef = visit_FunctionDef = visit_AsyncFunctionDef = _scoped

    def visit_Attribute(self, node: ast.Attribute) -> None:
        parts: list[str] = []
        value: ast.expr = node
        while isinstance(value, ast.Attribute):
            parts.append(value.attr)
            value = value.value
        if isinstance(value, ast.Name) and value.id in self.bound:
            self._add(node, ".".join([self.bound[value.id], *reversed(parts)]))
            return        # the chain is one name: its inner attributes are not reads
        self.generic_visit(node)


def reads_in(source: str, module: str) -> list[Read]:
    """Every read of the machine's clock or entropy in ``source``."""
    finder = _Finder(module)
    finder.visit(ast.parse(source))
    return finder.found


def core_reads(root: Path, folders: tuple[str, ...] = CORE) -> list[Read]:
    """Every read in the modules under ``folders`` of ``root``."""
    return [read for folder in folders for path in sorted((root / folder).rglob("*.py"))
            for read in reads_in(path.read_text(), path.relative_to(root).as_posix())]


def bypasses(reads: list[Read], allowed: dict[tuple[str, str, str], str]) -> list[str]:
    """The reads ``allowed`` does not list, and the allowed reads no longer there."""
    keys = {read.key() for read in reads}
    return ([f"{r.module}:{r.line} {r.function} reads {r.name}: take it from the Seam"
             for r in reads if r.key() not in allowed]
            + [f"{key} is allowed but no longer read: drop it from ALLOWED"
               for key in allowed if key not in keys])


def test_the_core_reads_time_and_randomness_only_through_its_seam() -> None:
    assert bypasses(core_reads(ROOT), ALLOWED) == []


PLANTED = """\
import time
import uuid as ids
from os import urandom
from random import randint
from datetime import datetime
import secrets


def stamp(clock=time.time_ns):
    return clock() + time.perf_counter()


class Purger:
    def name(self):
        return f"{ids.uuid4()}-{secrets.token_hex(4)}-{datetime.now()}"
"""


def test_a_planted_read_is_reported_in_every_form(tmp_path: Path) -> None:
    (tmp_path / "om" / "flows").mkdir(parents=True)
    (tmp_path / "om" / "flows" / "planted.py").write_text(PLANTED)
    found = {(read.line, read.function, read.name) for read in core_reads(tmp_path)}
    assert found == {
        (3, "<module>", "os.urandom"), (4, "<module>", "random.randint"),
        (9, "stamp", "time.time_ns"), (10, "stamp", "time.perf_counter"),
        (15, "Purger.name", "uuid.uuid4"), (15, "Purger.name", "secrets.token_hex"),
        (15, "Purger.name", "datetime.datetime.now")}
    assert len(bypasses(core_reads(tmp_path), {})) == 7


def test_what_reads_neither_is_not_reported() -> None:
    source = ("import asyncio, os, time, uuid\nfrom datetime import timedelta\n"
              "def f(seam):\n    time.sleep(0)\n    os.path.join('a')\n"
              "    asyncio.get_running_loop().time()\n"
              "    return uuid.UUID(bytes=seam.randomness(16), version=4), timedelta(1)\n")
    assert reads_in(source, "om/flows/clean.py") == []


def test_an_allowed_read_is_allowed_in_its_function_only() -> None:
    source = ("import time\nclass Snapshotter:\n    def serialize(self):\n"
              "        return time.perf_counter()\n    def deserialize(self):\n"
              "        return time.perf_counter()\n")
    module = "om/statemachine/raft_snapshot.py"
    allowed = {(module, "Snapshotter.serialize", "time.perf_counter"): "logged"}
    assert bypasses(reads_in(source, module), allowed) == [
        f"{module}:6 Snapshotter.deserialize reads time.perf_counter: take it from the Seam"]


def test_an_allowed_read_that_is_gone_is_reported() -> None:
    key = ("om/statemachine/raft_snapshot.py", "Snapshotter.serialize", "time.perf_counter")
    assert bypasses([], {key: "logged"}) == [
        f"{key} is allowed but no longer read: drop it from ALLOWED"]
