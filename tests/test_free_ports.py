"""``free_port_base`` stays in the range ``$OM_FREE_PORTS`` names, and the suite's
parallel workers each get a share no other worker's overlaps (``tests/conftest.py``)."""

from __future__ import annotations

import itertools
import socket

import pytest

from om.cluster import lifecycle as om_cluster
from tests.processes import worker_free_ports


def test_a_base_is_drawn_from_the_named_range_only(monkeypatch: pytest.MonkeyPatch) -> None:
    low = om_cluster.FREE_PORTS_LOW + 3_000
    monkeypatch.setenv(om_cluster.FREE_PORTS_ENV, f"{low}-{low + 3 * om_cluster.PORT_RANGE}")
    bases = {om_cluster.free_port_base() for _ in range(60)}
    assert bases <= {low, low + om_cluster.PORT_RANGE, low + 2 * om_cluster.PORT_RANGE}
    assert len(bases) > 1
    for base in bases:
        ports = [p for node in om_cluster.node_addresses(3, base) for p in node.ports]
        assert low <= min(ports)
        assert max(ports) < low + 3 * om_cluster.PORT_RANGE


def test_without_the_variable_every_base_is_below_the_ephemeral_ports(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(om_cluster.FREE_PORTS_ENV, raising=False)
    assert om_cluster.free_port_range() == (om_cluster.FREE_PORTS_LOW,
                                            om_cluster.EPHEMERAL_BELOW)
    base = om_cluster.free_port_base()
    assert base >= om_cluster.FREE_PORTS_LOW
    assert base + om_cluster.PORT_RANGE <= om_cluster.EPHEMERAL_BELOW


@pytest.mark.parametrize("value", ["20000", "x-y", "30000-30010", "1024-2048",
                                   "30000-40000"])
def test_a_range_that_is_malformed_or_too_small_or_outside_is_refused(
        monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(om_cluster.FREE_PORTS_ENV, value)
    with pytest.raises(om_cluster.ClusterError, match=om_cluster.FREE_PORTS_ENV):
        om_cluster.free_port_base()


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 7])
def test_the_workers_shares_are_disjoint_and_within_the_range(workers: int) -> None:
    shares = [worker_free_ports(worker, workers) for worker in range(workers)]
    for (_, high), (low, _) in itertools.pairwise(shares):
        assert high <= low
    assert shares[0][0] >= om_cluster.FREE_PORTS_LOW
    assert shares[-1][1] <= om_cluster.EPHEMERAL_BELOW
    assert all(high - low >= 100 * om_cluster.PORT_RANGE // workers for low, high in shares)


@pytest.mark.parametrize("shards", [2, 4, 8])
def test_a_base_for_shards_spans_their_ports(monkeypatch: pytest.MonkeyPatch,
                                             shards: int) -> None:
    """With S shards a cluster spans 20 + 10 S ports: every node's shard ports inside its
    base's range, so two clusters drawn side by side never share one (red: bases drawn
    30 apart put shard 1's ports of one cluster on the next one's client ports)."""
    span = om_cluster.port_range(shards)
    assert span == 20 + 10 * shards
    assert om_cluster.port_range(1) == om_cluster.PORT_RANGE == 30
    low = om_cluster.FREE_PORTS_LOW + 3_000
    monkeypatch.setenv(om_cluster.FREE_PORTS_ENV, f"{low}-{low + 3 * span}")
    bases = {om_cluster.free_port_base(9, shards=shards) for _ in range(40)}
    assert bases <= {low, low + span, low + 2 * span}
    for base in bases:
        ports = [p for node in om_cluster.node_addresses(9, base)
                 for p in node.ports_with_shards(shards)]
        assert len(set(ports)) == len(ports)
        assert base <= min(ports)
        assert max(ports) < base + span
    monkeypatch.setenv(om_cluster.FREE_PORTS_ENV, f"{low}-{low + span - 1}")
    with pytest.raises(om_cluster.ClusterError, match=f"no range of {span} ports"):
        om_cluster.free_port_base(shards=shards)


def test_a_taken_shard_port_is_named_before_anything_starts() -> None:
    """``check_ports_free`` with shards checks their ports too (red: a cluster started
    over a taken shard port fails stop once its shard process cannot bind)."""
    nodes = om_cluster.node_addresses(3, om_cluster.free_port_base(3, shards=2))
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", nodes[1].shard_port(1)))
        holder.listen()
        om_cluster.check_ports_free(nodes)   # one shard: that port is none of the cluster's
        with pytest.raises(om_cluster.ClusterError,
                           match=rf"{nodes[1].shard_port(1)} \(om2's shard 1 client port\)"):
            om_cluster.check_ports_free(nodes, shards=2)
