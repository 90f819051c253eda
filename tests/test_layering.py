"""The architecture, as import rules, over every tree the repository ships or tests with.

What is read: ``om/`` (the product), ``bench/`` (load generators and the benchmark
driver), ``spark_analysis/`` (the trace analysis) and the tests' helpers: every module
under ``tests/`` that is not a test module (``test_*.py``), so the harnesses,
``processes.py``, ``prom_text.py``, the crash worker, each folder's builders and nodes,
and the ``conftest.py`` files. A helper is whatever tests share; a test module is read
only as the target of an import, which none of the modules read may make (a test
module's own imports are the test's business).

* ``EDGES`` is the table of who may import whom, package by package (a package is a
  folder under ``om/``, or one of the root modules ``config``, ``__main__``; each other
  tree is one package: ``bench``, ``spark_analysis``, ``tests``); the table has no
  cycle, so neither can the packages. Every package is in it.
* The leaves (``protocol``, ``config``, ``observe``, ``disk``, and ``schema``, which
  speaks ``protocol``) import no other package. ``executor`` imports only leaves;
  ``gatekeeper`` imports leaves and ``executor``, never the other way round. The
  state machine never imports the flows, the gatekeeper or consensus; consensus sees
  entries and snapshots as opaque bytes (``config``, ``observe``, ``disk``, and
  ``protocol`` for the framing of its process channel).
* The flows use consensus through its port (``ONLY_THROUGH``), never the adapter.
* Only ``om/node`` wires processes and sockets: the pieces that start a process or a
  thread or open a socket for a node (``WIRED``) are imported, outside their own
  package, by ``om.node`` alone among om's packages (``bench`` and the tests' helpers
  compose nodes of their own: the in-process ceiling, the harnesses).
* ``bench`` imports om's packages but never its command line; of om, only the two
  commands that run it, ``om.cli.bench`` and ``om.cli.freon``, import ``bench``
  (``ONLY_FROM``; the table says why this edge is declared). ``spark_analysis``
  imports neither: the trace schema (docs/TRACES.md) is its only contract with them.
  The tests' helpers may import all three; nothing of the three imports them.
* Each listed third-party library has one owner (``OWNER``): only
  ``om/consensus/pysyncobj/`` imports pysyncobj, only ``om/statemachine/`` rocksdict,
  only ``spark_analysis/`` pyspark (and its ``plots.py`` matplotlib), only
  ``bench/locustfile.py`` locust. Tests may drive any library: they check the owners.
* No import cycle between any two modules read (every import statement counts, also
  one inside a function), and no private name (``_x``) of a module read is used by
  another module.
* The core stays sans-IO: gatekeeper, executor and schema (and integrity's digest
  tree, vote and auditor) import no asyncio, threads, sockets, pysyncobj or rocksdict, not even
  indirectly through om modules.
* ``om/`` root holds only ``__init__.py``, ``__main__.py`` and ``config.py``.

Each rule is checked by a function over a tree or a module graph, and each of those
functions is shown to fail on a synthetic tree under ``tmp_path`` that breaks its rule
(the red cases below).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Mapping
from pathlib import Path

import pytest

import om

REPO = Path(om.__file__).parent.parent
ROOT = REPO / "om"
# the trees read, each a folder of the repository
TREES = ("om", "bench", "spark_analysis", "tests")
# the trees the product ships (pyproject's packages): the owner rule holds there
PRODUCT_TREES = ("om", "bench", "spark_analysis")
TEST_MODULE_PREFIX = "test_"
TEST_MODULES = "test modules"   # the pseudo-package of test modules: in no one's edges

LEAVES: tuple[str, ...] = ("protocol", "config", "observe", "disk")
CORE = ("protocol", "schema")
# package -> the packages it may import (besides itself)
EDGES: dict[str, tuple[str, ...]] = {
    # om/__init__.py: the package's docstring only
    "om": (),
    # leaves: anything may import them
    "protocol": (),
    "config": (),
    "observe": (),
    "disk": (),
    "schema": ("protocol",),
    # the pure core: handlers, then the gatekeeper's logic above them
    "executor": CORE,
    "gatekeeper": (*CORE, "config", "executor"),
    # the replicated state (the old flow's apply runs handlers) and consensus
    "statemachine": (*CORE, "config", "disk", "executor"),
    "consensus": ("protocol", "config", "observe", "disk"),
    "security": ("protocol",),
    "integrity": (*CORE, "disk", "executor", "statemachine"),
    "flows": (*CORE, "config", "observe", "executor", "gatekeeper", "statemachine",
              "consensus"),
    # the composition root
    "node": (*CORE, *LEAVES, "executor", "gatekeeper", "statemachine", "consensus",
             "security", "integrity", "flows"),
    # clients and tools, outside any node
    "client": ("protocol", "security"),
    "cluster": (*CORE, "config", "executor", "gatekeeper", "statemachine", "consensus",
                "security", "client"),
    "chaos": ("protocol", "config", "security", "client", "cluster"),
    # the simulator: whole nodes (leader flow, apply, store, Raft on a simulated wire and
    # disk) on one virtual clock, judged by chaos's checkers (docs/RELIABILITY.md)
    "sim": (*CORE, "config", "observe", "executor", "gatekeeper", "statemachine",
            "consensus", "flows", "client", "chaos"),
    # The command line runs the benchmark: `om bench` and `om freon` are the user's
    # commands for bench/, which ships in the same distribution (pyproject's packages),
    # so the edge is real and declared here. Hidden behind importlib or an entry-point
    # plugin it would still be there, only out of this test's sight (and an entry point
    # lives in installed metadata: every checkout would need a reinstall to keep the
    # commands). It stays narrow, two modules (ONLY_FROM), and acyclic: bench never
    # imports the command line.
    "cli": (*CORE, *LEAVES, "executor", "statemachine", "security", "integrity", "node",
            "client", "cluster", "chaos", "bench"),
    "__main__": ("cli",),
    # outside om: the benchmark drives om's packages (a node in-process for the ceiling,
    # clusters, clients), never its command line
    "bench": (*CORE, *LEAVES, "executor", "gatekeeper", "statemachine", "consensus",
              "security", "integrity", "flows", "node", "client", "cluster", "chaos"),
    # the trace schema is spark_analysis's only contract (DESIGN section 6)
    "spark_analysis": (),
    # the tests' helpers: anything shipped; test modules are no one's to import
    "tests": ("om", *CORE, *LEAVES, "executor", "gatekeeper", "statemachine", "consensus",
              "security", "integrity", "flows", "node", "client", "cluster", "chaos", "sim", "cli",
              "__main__", "bench", "spark_analysis"),
}
OM_PACKAGES = tuple(p for p in EDGES if p not in ("bench", "spark_analysis", "tests"))
# (package, imported package) -> the only modules of it the package may import
ONLY_THROUGH: dict[tuple[str, str], tuple[str, ...]] = {
    ("flows", "consensus"): ("om.consensus.port",),
}
# (package, imported package) -> the only modules of the package that may import it
ONLY_FROM: dict[tuple[str, str], tuple[str, ...]] = {
    ("cli", "bench"): ("om.cli.bench", "om.cli.freon"),
}
# modules that start a process or a thread, or open a socket, for a node: among om's
# packages only the node wires them (their own package aside)
WIRED = ("om.consensus.pysyncobj.process", "om.consensus.pysyncobj.replicator",
         "om.consensus.local", "om.observe.http_endpoint", "om.integrity.service",
         "om.integrity.verifier", "om.integrity.periodic")
WIRING_PACKAGE = "node"
ROOT_FILES = {"__init__.py", "__main__.py", "config.py"}

FORBIDDEN = {"asyncio", "pysyncobj", "rocksdict", "uvloop", "socket", "threading"}
SANS_IO_PACKAGES = ("gatekeeper", "executor", "schema")
# modules outside the core packages that must stay sans-IO too
SANS_IO_MODULES = ("integrity/digest_tree.py", "integrity/vote.py", "integrity/auditor.py")
# third-party module -> the only places (a folder ending in "/", or a file, relative
# to the repository) of the product trees that may import it
OWNER: dict[str, tuple[str, ...]] = {
    "pysyncobj": ("om/consensus/pysyncobj/",),
    "rocksdict": ("om/statemachine/",),
    "pyspark": ("spark_analysis/",),
    "matplotlib": ("spark_analysis/plots.py",),
    "locust": ("bench/locustfile.py",),
}

Graph = Mapping[str, set[str]]


# ------------------------------------------------------------------ reading the tree ---

def _is_test_module(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "tests" and parts[-1].startswith(TEST_MODULE_PREFIX)


def _modules(base: Path) -> dict[str, Path]:
    """Every module of the trees under ``base`` by its dotted name (a package by its own
    name), test modules included."""
    found: dict[str, Path] = {}
    for tree in TREES:
        for path in (base / tree).rglob("*.py"):
            parts = path.relative_to(base).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _sources(base: Path) -> dict[str, Path]:
    """The modules whose imports the rules read: every one but the test modules."""
    return {m: p for m, p in _modules(base).items() if not _is_test_module(m)}


@functools.cache
def _import_nodes(path: Path) -> tuple[ast.Import | ast.ImportFrom, ...]:
    return tuple(node for node in _nodes(path) if isinstance(node, ast.Import | ast.ImportFrom))


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The module a ``from`` import names, with relative imports resolved."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join([*base, node.module] if node.module else base)


def _known(name: str, modules: Mapping[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is a module of the tree."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


@functools.cache
def _nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of the syntax tree of ``path``, parsed and walked once per run (the
    rules read a module many times: once per core file that reaches it, for one; a
    walk of every module took longer than its parse)."""
    return tuple(ast.walk(ast.parse(path.read_text())))


@functools.cache
def _imports(path: Path) -> frozenset[str]:
    """Every name an import statement of ``path`` names (``m`` and ``m.x`` for
    ``from m import x``), third-party ones included."""
    names: set[str] = set()
    for node in _import_nodes(path):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return frozenset(names)


def _module_graph(base: Path) -> dict[str, set[str]]:
    """module -> the modules of the trees it imports (any import statement, also one
    inside a function; ``from p import m`` counts as an import of module ``p.m``), for
    every module but the test modules, which appear only as targets."""
    modules = _modules(base)
    graph: dict[str, set[str]] = {}
    for module, path in _sources(base).items():
        targets: set[str] = set()
        for node in _import_nodes(path):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                origin = _absolute(node, module, path.name == "__init__.py")
                names = [f"{origin}.{alias.name}" for alias in node.names]
            targets.update(t for t in (_known(n, modules) for n in names) if t is not None)
        graph[module] = targets - {module}
    return graph


def package_of(module: str) -> str:
    """The package of ``om.a.b`` is ``a``; of a root module ``om.config``, ``config``; of
    any other tree's module, the tree (``bench``, ``tests``); of a test module,
    ``TEST_MODULES``."""
    parts = module.split(".")
    if parts[0] != "om":
        return TEST_MODULES if _is_test_module(module) else parts[0]
    return parts[1] if len(parts) > 1 else parts[0]


# --------------------------------------------------------------------------- rules ---

def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), and nodes
    that import themselves: each is an import cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def layer_violations(graph: Graph, edges: Mapping[str, tuple[str, ...]]) -> list[str]:
    """Each import of a package the table does not allow its importer, through a module
    or from a module ``ONLY_THROUGH`` / ``ONLY_FROM`` do not name."""
    bad = []
    for module, targets in sorted(graph.items()):
        source = package_of(module)
        for target in sorted(targets):
            dest = package_of(target)
            if dest == source:
                continue
            if dest not in edges.get(source, ()):
                bad.append(f"{module} imports {target}: {source} may not import {dest}")
            elif target not in ONLY_THROUGH.get((source, dest), (target,)):
                bad.append(f"{module} imports {target}: {source} uses {dest} only through "
                           f"{ONLY_THROUGH[(source, dest)]}")
            elif module not in ONLY_FROM.get((source, dest), (module,)):
                bad.append(f"{module} imports {target}: {source} imports {dest} only from "
                           f"{ONLY_FROM[(source, dest)]}")
    return bad


def wiring_violations(graph: Graph) -> list[str]:
    """Each import of a ``WIRED`` module from an om package other than its own and the
    node's."""
    return [f"{module} imports {target}: only om.{WIRING_PACKAGE} wires it"
            for module, targets in sorted(graph.items()) for target in sorted(targets)
            if target in WIRED and package_of(module) in OM_PACKAGES
            and package_of(module) not in (WIRING_PACKAGE, package_of(target))]


def private_uses(base: Path) -> list[str]:
    """Each private name (``_x``, not ``__x__``) of a module read that another module
    imports or reads as an attribute of the module."""
    modules = _modules(base)
    bad = []
    for module, path in sorted(_sources(base).items()):
        bound: dict[str, str] = {}   # local name -> the tree module it names
        for node in _import_nodes(path):
            if isinstance(node, ast.Import):
                bound.update({alias.asname: alias.name for alias in node.names
                              if alias.asname and alias.name in modules})
                continue
            origin = _absolute(node, module, path.name == "__init__.py")
            for alias in node.names:
                full = f"{origin}.{alias.name}"
                if _private(alias.name) and _known(origin, modules) is not None:
                    bad.append(f"{module} imports {full}")
                if full in modules:
                    bound[alias.asname or alias.name] = full
        bad.extend(f"{module} uses {bound[use.value.id]}.{use.attr}"
                   for use in _nodes(path)
                   if isinstance(use, ast.Attribute) and _private(use.attr)
                   and isinstance(use.value, ast.Name) and use.value.id in bound
                   and bound[use.value.id] != module)
    return bad


def _private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__")


def _sans_io_files(base: Path) -> list[Path]:
    """The core's files: every module of ``SANS_IO_PACKAGES`` and ``SANS_IO_MODULES``."""
    files = [p for pkg in SANS_IO_PACKAGES for p in sorted((base / "om" / pkg).rglob("*.py"))]
    return files + [base / "om" / m for m in SANS_IO_MODULES if (base / "om" / m).exists()]


def io_reached(base: Path) -> list[str]:
    """Each core file that reaches a ``FORBIDDEN`` module, itself or through the om
    modules it imports (at any depth), with the module that imports it."""
    modules = _modules(base)
    bad: list[str] = []
    for path in _sans_io_files(base):
        seen: dict[Path, frozenset[str]] = {}
        todo = [path]
        while todo:
            current = todo.pop()
            if current not in seen:
                seen[current] = _imports(current)
                todo.extend(modules[m] for m in (_known(n, modules) for n in seen[current])
                            if m is not None and m.split(".")[0] == "om")
        bad.extend(f"{path.relative_to(base)} reaches {sorted(found)} via "
                   f"{via.relative_to(base)}"
                   for via, imported in sorted(seen.items())
                   if (found := {m for m in imported if m.split(".")[0] in FORBIDDEN}))
    return bad


def owner_violations(base: Path) -> list[str]:
    """Each module of the product trees importing an ``OWNER`` library it does not own."""
    bad: list[str] = []
    for tree in PRODUCT_TREES:
        for path in sorted((base / tree).rglob("*.py")):
            where = path.relative_to(base).as_posix()
            used = {m.split(".")[0] for m in _imports(path)} & OWNER.keys()
            bad.extend(f"{where} imports {library}: only {OWNER[library]}"
                       for library in sorted(used) if not _owns(where, OWNER[library]))
    return bad


def _owns(where: str, owners: tuple[str, ...]) -> bool:
    return any(where.startswith(o) if o.endswith("/") else where == o for o in owners)


def root_file_violations(base: Path) -> list[str]:
    """Each file at ``om/`` root besides ``ROOT_FILES``, and each of them missing."""
    present = {p.name for p in (base / "om").glob("*.py")}
    return ([f"om/{name} at om/ root" for name in sorted(present - ROOT_FILES)]
            + [f"om/{name} missing" for name in sorted(ROOT_FILES - present)])


# ------------------------------------------------------------------ the real tree ---

@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return _module_graph(REPO)


def test_om_root_keeps_only_the_entry_point_and_the_configuration() -> None:
    assert not root_file_violations(REPO)


def test_every_package_is_in_the_table_and_the_table_has_no_cycle(graph: Graph) -> None:
    assert {package_of(m) for m in graph} == set(EDGES)
    assert not cycles({p: set(targets) for p, targets in EDGES.items()})
    for leaf in LEAVES:
        assert EDGES[leaf] == (), leaf
    assert set(EDGES["schema"]) <= set(LEAVES)
    for core in ("executor", "gatekeeper"):
        assert set(EDGES[core]) <= {*LEAVES, "schema", "executor"}, core
    assert "gatekeeper" not in EDGES["executor"]
    assert not {"flows", "gatekeeper", "consensus"} & set(EDGES["statemachine"])
    assert [p for p, allowed in EDGES.items() if "bench" in allowed] == ["cli", "tests"]
    assert not {"cli", "__main__", "tests"} & set(EDGES["bench"])
    assert all("tests" not in allowed for p, allowed in EDGES.items() if p != "tests")
    assert all(TEST_MODULES not in allowed for allowed in EDGES.values())


def test_every_tree_and_the_tests_helpers_are_read(graph: Graph) -> None:
    assert {m.split(".")[0] for m in graph} == set(TREES)
    helpers = {m for m in graph if package_of(m) == "tests"}
    assert {"tests.conftest", "tests.processes", "tests.cluster_harness",
            "tests.handler_harness", "tests.leader_harness", "tests.consensus.raft_nodes",
            "tests.spark.conftest"} <= helpers
    assert not any(_is_test_module(m) for m in graph)
    assert "bench.driver" in graph["om.cli.bench"]


def test_packages_import_only_what_the_table_allows(graph: Graph) -> None:
    assert len(graph) > 250
    assert not layer_violations(graph, EDGES)


def test_only_the_node_wires_processes_and_sockets(graph: Graph) -> None:
    assert set(WIRED) <= set(graph)
    assert not wiring_violations(graph)


def test_no_import_cycles(graph: Graph) -> None:
    assert not cycles(graph)


def test_no_private_name_crosses_a_module_boundary() -> None:
    assert not private_uses(REPO)


def test_core_packages_import_no_io() -> None:
    assert len(_sans_io_files(REPO)) > 10
    assert all((ROOT / m).exists() for m in SANS_IO_MODULES)
    assert not io_reached(REPO)


def test_each_library_has_one_owner() -> None:
    assert not owner_violations(REPO)
    for library, owners in OWNER.items():   # each owner uses it: the table is not stale
        assert any(library in {m.split(".")[0] for m in _imports(p)}
                   for tree in PRODUCT_TREES for p in (REPO / tree).rglob("*.py")
                   if _owns(p.relative_to(REPO).as_posix(), owners)), library


# ---------------------------------------------------------------- the red cases ---

def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    """Trees under tmp_path holding ``files`` (paths from the repository's root, e.g.
    ``om/flows/x.py``; each package gets its ``__init__.py``); returns tmp_path."""
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(tmp_path).parents:
            if parent != Path("."):
                (tmp_path / parent / "__init__.py").touch()
        path.write_text(text)
    return tmp_path


def test_an_upward_import_is_found(tmp_path: Path) -> None:
    base = _tree(tmp_path, {
        "om/executor/handler.py": "from om.flows.template import Service\n",
        "om/executor/rows.py": "from om.schema import tables\n",
        "om/flows/template.py": "from om.consensus.pysyncobj.replicator import Raft\n",
        "om/schema/tables.py": "",
        "om/consensus/pysyncobj/replicator.py": "",
        "om/statemachine/apply.py": "def late():\n    from om.gatekeeper import retry_cache\n",
        "om/gatekeeper/retry_cache.py": "",
    })
    graph = _module_graph(base)
    assert graph["om.executor.handler"] == {"om.flows.template"}
    assert layer_violations(graph, EDGES) == [
        "om.executor.handler imports om.flows.template: executor may not import flows",
        "om.flows.template imports om.consensus.pysyncobj.replicator: flows uses "
        "consensus only through ('om.consensus.port',)",
        "om.statemachine.apply imports om.gatekeeper.retry_cache: statemachine may not "
        "import gatekeeper",
    ]
    assert wiring_violations(graph) == [
        "om.flows.template imports om.consensus.pysyncobj.replicator: only om.node "
        "wires it"]


def test_the_trees_beside_om_break_their_edges_and_are_found(tmp_path: Path) -> None:
    base = _tree(tmp_path, {
        "om/cli/bench.py": "from bench import driver\n",
        "om/cli/sh.py": "from bench.progress import Bar\n",
        "om/cli/common.py": "",
        "om/flows/template.py": "import bench.driver\n",
        "om/node/node.py": "from tests.processes import free_port\n",
        "om/consensus/local.py": "",
        "om/protocol/om_pb2.py": "",
        "bench/driver.py": "from om.cli.common import x\nfrom om.consensus import local\n",
        "bench/progress.py": "",
        "spark_analysis/job.py": "from om.protocol import om_pb2\n",
        "tests/processes.py": "from om.cli import common\nfrom bench import driver\n"
                              "from spark_analysis import job\nfrom tests import test_apply\n",
        "tests/test_apply.py": "from om.node.node import _private_thing\n",
    })
    graph = _module_graph(base)
    assert "tests.test_apply" not in graph
    assert layer_violations(graph, EDGES) == [
        "bench.driver imports om.cli.common: bench may not import cli",
        "om.cli.sh imports bench.progress: cli imports bench only from "
        "('om.cli.bench', 'om.cli.freon')",
        "om.flows.template imports bench.driver: flows may not import bench",
        "om.node.node imports tests.processes: node may not import tests",
        "spark_analysis.job imports om.protocol.om_pb2: spark_analysis may not import "
        "protocol",
        "tests.processes imports tests.test_apply: tests may not import test modules",
    ]
    assert not wiring_violations(graph)   # bench composes a node of its own


def test_a_cycle_is_found() -> None:
    assert cycles({"om.a": {"om.b"}, "om.b": {"om.c"}, "om.c": {"om.a"}, "om.d": {"om.a"}}) \
        == [["om.a", "om.b", "om.c"]]
    assert cycles({"om.a": {"om.a"}}) == [["om.a"]]
    assert cycles({"om.a": {"om.b"}, "om.b": set()}) == []
    assert cycles({"executor": {"gatekeeper"}, "gatekeeper": {"executor"}})


def test_a_cycle_through_a_late_import_is_found(tmp_path: Path) -> None:
    base = _tree(tmp_path, {
        "om/cli/__init__.py": "from om.cli import admin\n",
        "om/cli/admin.py": "from om.cli import verify\n",
        "om/cli/verify.py": "def targets():\n    from om.cli import admin\n    return admin\n",
    })
    assert cycles(_module_graph(base)) == [["om.cli.admin", "om.cli.verify"]]


def test_a_cycle_across_trees_is_found(tmp_path: Path) -> None:
    base = _tree(tmp_path, {
        "om/cli/bench.py": "from bench import driver\n",
        "bench/driver.py": "def run():\n    from om.cli import bench\n",
    })
    assert cycles(_module_graph(base)) == [["bench.driver", "om.cli.bench"]]


def test_a_private_name_across_modules_is_found(tmp_path: Path) -> None:
    base = _tree(tmp_path, {
        "om/cli/admin.py": "def _nodes(): ...\ndef _own(): ...\nx = _own()\n",
        "om/cli/verify.py": "from om.cli.admin import _nodes\n",
        "om/cli/audit.py": "from om.cli import admin\ny = admin._nodes()\nz = admin.__doc__\n",
        "om/cli/sh.py": "import os\nos._exit(0)\nfrom os import _exit\n",
        "bench/driver.py": "from om.cli import admin as a\nn = a._nodes()\n",
        "tests/test_x.py": "from om.cli.admin import _nodes\n",
    })
    assert private_uses(base) == ["bench.driver uses om.cli.admin._nodes",
                                  "om.cli.audit uses om.cli.admin._nodes",
                                  "om.cli.verify imports om.cli.admin._nodes"]


def test_io_reached_by_the_core_is_found(tmp_path: Path) -> None:
    base = _tree(tmp_path, {
        "om/executor/handler.py": "from om.schema import rows\n",
        "om/schema/rows.py": "def late():\n    from om.observe import clock\n",
        "om/observe/clock.py": "import threading\n",
        "om/gatekeeper/locks.py": "import asyncio.locks\n",
        "om/integrity/digest_tree.py": "from rocksdict import Rdict\n",
        "om/integrity/service.py": "import socket\n",   # not the core: allowed
    })
    assert io_reached(base) == [
        "om/gatekeeper/locks.py reaches ['asyncio.locks'] via om/gatekeeper/locks.py",
        "om/executor/handler.py reaches ['threading'] via om/observe/clock.py",
        "om/schema/rows.py reaches ['threading'] via om/observe/clock.py",
        "om/integrity/digest_tree.py reaches ['rocksdict', 'rocksdict.Rdict'] via "
        "om/integrity/digest_tree.py",
    ]


def test_a_library_outside_its_owner_is_found(tmp_path: Path) -> None:
    base = _tree(tmp_path, {
        "om/statemachine/store.py": "import rocksdict\n",
        "om/flows/x.py": "from rocksdict import Rdict\n",
        "om/consensus/pysyncobj/raft.py": "from pysyncobj import SyncObj\n",
        "om/consensus/local.py": "def late():\n    import pysyncobj\n",
        "bench/locustfile.py": "import locust\n",
        "bench/driver.py": "from locust import User\n",
        "spark_analysis/plots.py": "import matplotlib.figure\nimport pyspark\n",
        "spark_analysis/report.py": "from matplotlib.axes import Axes\n",
        "tests/spark_helpers.py": "import pyspark\nimport rocksdict\n",   # tests: any
    })
    assert owner_violations(base) == [
        "om/consensus/local.py imports pysyncobj: only ('om/consensus/pysyncobj/',)",
        "om/flows/x.py imports rocksdict: only ('om/statemachine/',)",
        "bench/driver.py imports locust: only ('bench/locustfile.py',)",
        "spark_analysis/report.py imports matplotlib: only ('spark_analysis/plots.py',)",
    ]


def test_a_file_at_om_root_is_found(tmp_path: Path) -> None:
    base = _tree(tmp_path, {"om/__init__.py": "", "om/config.py": "", "om/pipeline.py": "",
                            "om/flows/x.py": ""})
    assert root_file_violations(base) == ["om/pipeline.py at om/ root",
                                          "om/__main__.py missing"]


def test_the_checks_read_every_import_form(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import asyncio\nfrom rocksdict import Rdict\nfrom om.flows import x\n")
    assert {"asyncio", "rocksdict", "om.flows.x"} <= _imports(sample)
    base = _tree(tmp_path, {
        "om/flows/x.py": "", "om/flows/y.py": "from . import x\nfrom .x import z\n",
        "om/flows/z/__init__.py": "from .. import x\n", "om/protocol/p.py": "import om.flows.x\n",
        "tests/spark/conftest.py": "from .tracegen import records\n", "tests/spark/tracegen.py": "",
    })
    graph = _module_graph(base)
    assert graph["om.flows.y"] == {"om.flows.x"}
    assert graph["om.flows.z"] == {"om.flows.x"}
    assert graph["om.protocol.p"] == {"om.flows.x"}
    assert graph["tests.spark.conftest"] == {"tests.spark.tracegen"}
