"""The architecture, as import rules.

* ``EDGES`` is the table of who may import whom, package by package (a package is a
  folder under ``om/``, or one of the root modules ``config``, ``__main__``); the
  table has no cycle, so neither can the packages. Every package is in it.
* The leaves (``protocol``, ``config``, ``observe``, ``disk``, and ``schema``, which
  speaks ``protocol``) import no other package. ``executor`` imports only leaves;
  ``gatekeeper`` imports leaves and ``executor``, never the other way round. The
  state machine never imports the flows, the gatekeeper or consensus; consensus sees
  entries and snapshots as opaque bytes (``config``, ``observe``, ``disk``, and
  ``protocol`` for the framing of its process channel).
* The flows use consensus through its port (``ONLY_THROUGH``), never the adapter.
* Only ``om/node`` wires processes and sockets: the pieces that start a process or a
  thread or open a socket for a node (``WIRED``) are imported, outside their own
  package, by ``om.node`` alone.
* Only ``om/consensus/pysyncobj/`` imports pysyncobj; only ``om/statemachine/``
  imports rocksdict.
* No import cycle between any two modules of ``om/`` (every import statement counts,
  also one inside a function), and no private name (``_x``) of an om module is used
  by another module.
* The core stays sans-IO: gatekeeper, executor and schema (and integrity's merkle and
  auditor) import no asyncio, threads, sockets, pysyncobj or rocksdict, not even
  indirectly through om modules.
* ``om/`` root holds only ``__init__.py``, ``__main__.py`` and ``config.py``.

Each rule is checked by a function over a module graph, and each of those functions
is shown to fail on a tree or graph that breaks its rule (the red cases below).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

import om

ROOT = Path(om.__file__).parent

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
    "statemachine": (*CORE, "disk", "executor"),
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
    "cli": (*CORE, *LEAVES, "executor", "statemachine", "security", "integrity", "node",
            "client", "cluster", "chaos"),
    "__main__": ("cli",),
}
# (package, imported package) -> the only modules of it the package may import
ONLY_THROUGH: dict[tuple[str, str], tuple[str, ...]] = {
    ("flows", "consensus"): ("om.consensus.port",),
}
# modules that start a process or a thread, or open a socket, for a node: only the
# node wires them (their own package aside)
WIRED = ("om.consensus.pysyncobj.process", "om.consensus.pysyncobj.replicator",
         "om.consensus.local", "om.observe.http_endpoint", "om.integrity.service",
         "om.integrity.verifier", "om.integrity.periodic")
WIRING_PACKAGE = "node"
ROOT_FILES = {"__init__.py", "__main__.py", "config.py"}

FORBIDDEN = {"asyncio", "pysyncobj", "rocksdict", "uvloop", "socket", "threading"}
SANS_IO_PACKAGES = ("gatekeeper", "executor", "schema")
# modules outside the core packages that must stay sans-IO too
SANS_IO_MODULES = ("integrity/merkle.py", "integrity/auditor.py")
# third-party module -> the only package that may import it
OWNER = {"pysyncobj": "consensus/pysyncobj", "rocksdict": "statemachine"}

Graph = Mapping[str, set[str]]


# ------------------------------------------------------------------ reading the tree ---

def _modules(root: Path) -> dict[str, Path]:
    """Every module under ``root`` by its dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _import_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


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


def _imports(path: Path) -> set[str]:
    """Every name an import statement of ``path`` names (``m`` and ``m.x`` for
    ``from m import x``), third-party ones included."""
    names: set[str] = set()
    for node in _import_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _module_graph(root: Path) -> dict[str, set[str]]:
    """module -> the modules of the tree it imports (any import statement, also one
    inside a function; ``from p import m`` counts as an import of module ``p.m``)."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets: set[str] = set()
        for node in _import_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                base = _absolute(node, module, path.name == "__init__.py")
                names = [f"{base}.{alias.name}" for alias in node.names]
            targets.update(t for t in (_known(n, modules) for n in names) if t is not None)
        graph[module] = targets - {module}
    return graph


def package_of(module: str) -> str:
    """The package of ``om.a.b`` is ``a``; of a root module ``om.config``, ``config``."""
    parts = module.split(".")
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
    """Each import of a package the table does not allow its importer."""
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
    return bad


def wiring_violations(graph: Graph) -> list[str]:
    """Each import of a ``WIRED`` module from outside its package and the node."""
    return [f"{module} imports {target}: only om.{WIRING_PACKAGE} wires it"
            for module, targets in sorted(graph.items()) for target in sorted(targets)
            if target in WIRED
            and package_of(module) not in (WIRING_PACKAGE, package_of(target))]


def private_uses(root: Path) -> list[str]:
    """Each private name (``_x``, not ``__x__``) of a tree module that another module
    imports or reads as an attribute of the module."""
    modules = _modules(root)
    bad = []
    for module, path in sorted(modules.items()):
        tree = ast.parse(path.read_text())
        bound: dict[str, str] = {}   # local name -> the tree module it names
        for node in _import_nodes(tree):
            if isinstance(node, ast.Import):
                bound.update({alias.asname: alias.name for alias in node.names
                              if alias.asname and alias.name in modules})
                continue
            base = _absolute(node, module, path.name == "__init__.py")
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if _private(alias.name) and _known(base, modules) is not None:
                    bad.append(f"{module} imports {full}")
                if full in modules:
                    bound[alias.asname or alias.name] = full
        bad.extend(f"{module} uses {bound[use.value.id]}.{use.attr}"
                   for use in ast.walk(tree)
                   if isinstance(use, ast.Attribute) and _private(use.attr)
                   and isinstance(use.value, ast.Name) and use.value.id in bound
                   and bound[use.value.id] != module)
    return bad


def _private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__")


def _closure(start: Path) -> dict[Path, set[str]]:
    seen: dict[Path, set[str]] = {}
    todo = [start]
    modules = _modules(ROOT)
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen[path] = _imports(path)
        for name in seen[path]:
            module = _known(name, modules)
            if module is not None:
                todo.append(modules[module])
    return seen


# ------------------------------------------------------------------ the real tree ---

@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return _module_graph(ROOT)


def test_om_root_keeps_only_the_entry_point_and_the_configuration() -> None:
    assert {p.name for p in ROOT.glob("*.py")} == ROOT_FILES


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


def test_packages_import_only_what_the_table_allows(graph: Graph) -> None:
    assert len(graph) > 150
    assert not layer_violations(graph, EDGES)


def test_only_the_node_wires_processes_and_sockets(graph: Graph) -> None:
    assert set(WIRED) <= set(graph)
    assert not wiring_violations(graph)


def test_no_import_cycles(graph: Graph) -> None:
    assert not cycles(graph)


def test_no_private_name_crosses_a_module_boundary() -> None:
    assert not private_uses(ROOT)


def test_core_packages_import_no_io() -> None:
    core_files = [p for pkg in SANS_IO_PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    core_files += [ROOT / module for module in SANS_IO_MODULES]
    assert len(core_files) > 10
    for path in core_files:
        for module_path, imported in _closure(path).items():
            bad = {m for m in imported if m.split(".")[0] in FORBIDDEN}
            assert not bad, f"{path.relative_to(ROOT)} reaches {sorted(bad)} via {module_path}"


@pytest.mark.parametrize("library", sorted(OWNER))
def test_each_library_has_one_owner(library: str) -> None:
    for path in ROOT.rglob("*.py"):
        if library in {m.split(".")[0] for m in _imports(path)}:
            owner = path.relative_to(ROOT).as_posix()
            assert owner.startswith(OWNER[library] + "/"), f"{owner} imports {library}"


# ---------------------------------------------------------------- the red cases ---

def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    """A tree ``om/`` under tmp_path holding ``files`` (each package gets its
    ``__init__.py``)."""
    root = tmp_path / "om"
    for name, text in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(root).parents:
            (root / parent / "__init__.py").touch()
        path.write_text(text)
    return root


def test_an_upward_import_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "executor/handler.py": "from om.flows.template import Service\n",
        "executor/rows.py": "from om.schema import tables\n",
        "flows/template.py": "from om.consensus.pysyncobj.replicator import Raft\n",
        "schema/tables.py": "",
        "consensus/pysyncobj/replicator.py": "",
        "statemachine/apply.py": "def late():\n    from om.gatekeeper import retry_cache\n",
        "gatekeeper/retry_cache.py": "",
    })
    graph = _module_graph(root)
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


def test_a_cycle_is_found() -> None:
    assert cycles({"om.a": {"om.b"}, "om.b": {"om.c"}, "om.c": {"om.a"}, "om.d": {"om.a"}}) \
        == [["om.a", "om.b", "om.c"]]
    assert cycles({"om.a": {"om.a"}}) == [["om.a"]]
    assert cycles({"om.a": {"om.b"}, "om.b": set()}) == []
    assert cycles({"executor": {"gatekeeper"}, "gatekeeper": {"executor"}})


def test_a_cycle_through_a_late_import_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "cli/__init__.py": "from om.cli import admin\n",
        "cli/admin.py": "from om.cli import verify\n",
        "cli/verify.py": "def targets():\n    from om.cli import admin\n    return admin\n",
    })
    assert cycles(_module_graph(root)) == [["om.cli.admin", "om.cli.verify"]]


def test_a_private_name_across_modules_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "cli/admin.py": "def _nodes(): ...\ndef _own(): ...\nx = _own()\n",
        "cli/verify.py": "from om.cli.admin import _nodes\n",
        "cli/audit.py": "from om.cli import admin\ny = admin._nodes()\nz = admin.__doc__\n",
        "cli/sh.py": "import os\nos._exit(0)\nfrom os import _exit\n",
    })
    assert private_uses(root) == ["om.cli.audit uses om.cli.admin._nodes",
                                  "om.cli.verify imports om.cli.admin._nodes"]


def test_the_checks_read_every_import_form(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import asyncio\nfrom rocksdict import Rdict\nfrom om.flows import x\n")
    assert {"asyncio", "rocksdict", "om.flows.x"} <= _imports(sample)
    root = _tree(tmp_path, {
        "flows/x.py": "", "flows/y.py": "from . import x\nfrom .x import z\n",
        "flows/z/__init__.py": "from .. import x\n", "protocol/p.py": "import om.flows.x\n",
    })
    graph = _module_graph(root)
    assert graph["om.flows.y"] == {"om.flows.x"}
    assert graph["om.flows.z"] == {"om.flows.x"}
    assert graph["om.protocol.p"] == {"om.flows.x"}
