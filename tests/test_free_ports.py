"""``free_port_base`` stays in the range ``$OM_FREE_PORTS`` names, and the suite's
parallel workers each get a share no other worker's overlaps (``tests/conftest.py``)."""

from __future__ import annotations

import itertools

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
