"""The node's parts are picked from the configuration once (``om/node/parts.py``).

Each ``execution`` mode gets its state machine and write path, each ring its Raft
adapter (or none), all real (rocksdict, pysyncobj, the Raft child process); and no
module of ``om/node`` but ``parts.py`` names an implementation of a port, nor asks a
part its type with ``isinstance`` (read from the source's syntax tree).
"""

from __future__ import annotations

import ast
import inspect
import time
from pathlib import Path

import pytest

from om import config as om_config
from om.consensus.local import LocalReplicator
from om.consensus.pysyncobj.process import RaftProcessReplicator
from om.consensus.pysyncobj.replicator import RaftReplicator
from om.executor.context import Limits as HandlerLimits
from om.flows.batch_pipeline import BatchConfig
from om.flows.leader_flow import LeaderFlow
from om.flows.purge import PurgeConfig
from om.flows.replicated_flow import ReplicatedFlow
from om.flows.settings import LeaderConfig
from om.flows.template import RequestService
from om.flows.write_flow import WriteFlow
from om.gatekeeper.retry_cache import RetryCacheConfig
from om.node import parts
from om.node.node import Node
from om.protocol import om_pb2
from om.schema.seam import Seam
from om.statemachine import log_entry
from om.statemachine.apply import StateMachine
from om.statemachine.replicated_apply import ReplicatedStateMachine
from tests.processes import free_port

NODE = Path(parts.__file__).parent
# the implementations behind the node's ports: only parts.py picks among them
IMPLEMENTATIONS = frozenset({
    "StateMachine", "ReplicatedStateMachine", "LeaderFlow", "ReplicatedFlow", "leader_service",
    "replicated_flow_service",
    "RaftReplicator", "RaftProcessReplicator", "SimRaftReplicator", "LocalReplicator"})


def mode_dispatch(source: str) -> list[str]:
    """Where ``source`` names an implementation: an import of one, or an ``isinstance``
    against one (``line: text``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: set[str] = set()
        if isinstance(node, ast.ImportFrom):
            names = {alias.name for alias in node.names}
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "isinstance" and len(node.args) == 2):
            names = {n.id if isinstance(n, ast.Name) else n.attr
                     for n in ast.walk(node.args[1]) if isinstance(n, ast.Name | ast.Attribute)}
        if names & IMPLEMENTATIONS:
            found.append(f"{getattr(node, 'lineno', 0)}: {ast.unparse(node)}")
    return found


def test_only_parts_names_an_implementation() -> None:
    offenders = {path.name: found for path in sorted(NODE.glob("*.py"))
                 if path.name != "parts.py" and (found := mode_dispatch(path.read_text()))}
    assert offenders == {}


@pytest.mark.parametrize("source", [
    "from om.statemachine.replicated_apply import ReplicatedStateMachine\n",
    "def f(m):\n    return isinstance(m, ReplicatedStateMachine)\n",
    "def f(r):\n    return isinstance(r, (int, process.RaftProcessReplicator))\n",
])
def test_a_mode_asked_by_type_is_found(source: str) -> None:
    assert mode_dispatch(source)


@pytest.mark.parametrize("flow", [LeaderFlow, ReplicatedFlow])
def test_the_template_holds_its_write_flow_and_is_not_subclassed(flow: type) -> None:
    """Composition, not inheritance (issue 34): the template is one concrete class,
    no write flow is a template, and each flow defines every member of the
    ``WriteFlow`` port itself."""
    assert not inspect.isabstract(RequestService)
    assert not issubclass(flow, RequestService)
    port = {name for name in vars(WriteFlow) if not name.startswith("_")}
    assert port <= set(vars(flow)), port - set(vars(flow))


def test_every_configurable_execution_has_its_parts() -> None:
    assert set(parts.EXECUTIONS) == set(om_config.EXECUTIONS)


def test_the_tree_check_passes_a_node_module_without_dispatch() -> None:
    assert mode_dispatch("def f(x):\n    return isinstance(x, tuple)\n") == []


def one_node(directory: Path, execution: str) -> om_config.ServerConfig:
    path = directory / "om.toml"
    path.write_text(f'execution = "{execution}"\n')
    return om_config.load(path, data_dir=directory / "data")


@pytest.mark.parametrize(("execution", "machine", "flow"), [
    ("leader", StateMachine, LeaderFlow),
    ("replicated", ReplicatedStateMachine, ReplicatedFlow),
    ("switchable", ReplicatedStateMachine, LeaderFlow),
])
async def test_each_execution_gets_its_state_machine_and_write_path(
        tmp_path: Path, execution: str, machine: type, flow: type) -> None:
    node = Node(one_node(tmp_path, execution))
    try:
        assert type(node.state_machine) is machine
        assert type(node.leader) is RequestService
        assert type(node.leader.flow) is flow
        assert node.raft is None
        assert node.checkpoints is None
        assert node.replication.machine is node.state_machine
        assert type(node.replication.replicator) is LocalReplicator
        assert node.replication.metrics() == node.state_machine.metrics()
        assert node.state()["writes_in_flight"] == 0
    finally:
        await node.close()


async def test_the_seam_gives_the_node_its_clock_and_randomness(tmp_path: Path) -> None:
    seam = Seam(wall_ns=lambda: 1_234_000_999_999, elapsed_ns=time.perf_counter_ns,
                randomness=lambda n: b"\x07" * n)
    node = Node(one_node(tmp_path, "leader"), seam=seam)
    try:
        assert node.leader.clock_ms() == 1_234_000
        barrier = node.barrier_entry(3)
        decoded = log_entry.decode(barrier)
        assert decoded.timestamp_ms == 1_234_000
        await node.start()
        verify = await node.handle(om_pb2.OMRequest(
            cmd_type=om_pb2.StartVerify, client_id="c", call_id=1, user="om",
            start_verify=om_pb2.StartVerifyRequest()))
        assert verify.status == om_pb2.OK
        assert node.store.transaction_info().timestamp_ms == 1_234_000, "a verify entry's time"
    finally:
        await node.close()


@pytest.mark.integration
@pytest.mark.parametrize(("separate_process", "adapter"), [
    (True, RaftProcessReplicator), (False, RaftReplicator)])
async def test_a_ring_gets_the_raft_adapter_its_configuration_names(
        tmp_path: Path, separate_process: bool, adapter: type) -> None:
    nodes = "".join(f'[[nodes]]\nid = "om{i}"\nport = {free_port()}\n'
                    f"raft_port = {free_port()}\nhttp_port = 0\n" for i in (1, 2, 3))
    path = tmp_path / "om.toml"
    path.write_text(f"{nodes}[raft]\nseparate_process = {str(separate_process).lower()}\n")
    node = Node(om_config.load(path, data_dir=tmp_path / "data"))
    try:
        assert type(node.raft) is adapter
        assert node.replication.replicator is node.raft, "the Raft part is the pair's"
        assert node.checkpoints is not None
        assert node.checkpoint_client is not None
        await node.start()
        assert node.raft is not None
        assert not node.raft.catching_up
        assert node.state()["leader_changes"] == 0
        gauges = node.replication.metrics()
        assert gauges.items() >= node.state_machine.metrics().items()
        assert gauges["leader_changes"] == node.raft.metrics()["leader_changes"]
    finally:
        await node.close()


def test_a_default_configuration_gives_each_part_the_defaults_it_states() -> None:
    """Each limit is defined once (om/config.py): the flows' own settings default to
    what a default server configuration gives them."""
    settings = parts.leader_config(om_config.ServerConfig())
    default = LeaderConfig()
    assert settings.batch == BatchConfig()
    assert settings.retry == RetryCacheConfig()
    assert settings.purge == PurgeConfig()
    assert settings.limits == HandlerLimits()
    assert (settings.lock_timeout_s, settings.in_flight_max, settings.sweep_interval_s) == (
        default.lock_timeout_s, default.in_flight_max, default.sweep_interval_s)
