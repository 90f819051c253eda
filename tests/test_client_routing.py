"""How a client routes by shard (om/client/identity.py, om/protocol/shard_routing.py):
nothing changes until a node answers WRONG_SHARD with its shard count; from then on a
bucket's requests go to its shard's port on the node the client would have asked, and
everything else to shard 0's.

Red cases: a client that ignored S kept sending a bucket's requests to shard 0 (every
one a redirect); one that trusted any S (0, or far more than a node runs) divided by
zero or routed to ports nothing listens on; one that learned S from an answer other
than WRONG_SHARD; the client's shard ports drifting from the node's.
"""

from __future__ import annotations

import pytest

from om.client import requests as build
from om.client.identity import SHARDS_MAX, ClientIdentity
from om.client.retry_policy import Attempts, RetryPolicy
from om.config import SHARD_PORT_OFFSET, SHARD_PORT_STEP, NodeAddress
from om.config import SHARDS_MAX as NODE_SHARDS_MAX
from om.protocol import om_pb2, shard_routing
from om.protocol.shard_routing import shard_address, shard_of

NODES = ["127.0.0.1:9862", "127.0.0.1:9863", "127.0.0.1:9864"]
VOLUME = "vol"
SHARD_1 = next(f"b{i}" for i in range(100) if shard_of(VOLUME, f"b{i}", 2) == 1)
SHARD_0 = next(f"b{i}" for i in range(100) if shard_of(VOLUME, f"b{i}", 2) == 0)


def wrong_shard(shards: int) -> om_pb2.OMResponse:
    return om_pb2.OMResponse(status=om_pb2.WRONG_SHARD, shards=shards)


def test_a_client_routes_everything_to_shard_0_until_it_learns_s() -> None:
    client = ClientIdentity(NODES, user="u")
    assert client.route(build.create_key(VOLUME, SHARD_1, "k")) is client.addresses
    assert client.learn_shards(wrong_shard(2))
    assert client.route(build.create_key(VOLUME, SHARD_1, "k")) == \
        ["127.0.0.1:9892", "127.0.0.1:9893", "127.0.0.1:9894"]
    assert client.route(build.lookup_key(VOLUME, SHARD_0, "k")) is client.addresses
    assert client.route(build.create_volume(VOLUME)) is client.addresses


@pytest.mark.parametrize("answer", [
    wrong_shard(0), wrong_shard(SHARDS_MAX + 1),
    om_pb2.OMResponse(status=om_pb2.NOT_LEADER, shards=2),
    om_pb2.OMResponse(status=om_pb2.OK, shards=2)])
def test_only_a_wrong_shard_answer_with_a_sane_s_teaches_it(answer: om_pb2.OMResponse) -> None:
    client = ClientIdentity(NODES, user="u")
    assert not client.learn_shards(answer)
    assert client.shards == 1


def test_an_s_already_known_changes_nothing() -> None:
    """A second WRONG_SHARD with the same S is the caller's answer, not a loop."""
    client = ClientIdentity(NODES, user="u")
    assert client.learn_shards(wrong_shard(4))
    assert not client.learn_shards(wrong_shard(4))


def test_a_reroute_keeps_the_node_and_counts_a_retry() -> None:
    attempts = Attempts(list(NODES), 2, RetryPolicy(), 0.0)
    shard_2 = [shard_address(address, 2) for address in NODES]
    attempts.reroute(shard_2)
    assert attempts.address == shard_2[2]
    assert attempts.retries == 1


def test_the_clients_shard_ports_are_the_nodes() -> None:
    """Clients derive shard ports as nodes choose them (om.config is a leaf and keeps its
    own copy of the numbers)."""
    assert (shard_routing.SHARD_PORT_OFFSET, shard_routing.SHARD_PORT_STEP) == \
        (SHARD_PORT_OFFSET, SHARD_PORT_STEP)
    node = NodeAddress("om1", host="127.0.0.1", port=9862)
    for shard in range(NODE_SHARDS_MAX):
        assert shard_address(node.address, shard) == f"127.0.0.1:{node.shard_port(shard)}"
    assert SHARDS_MAX >= NODE_SHARDS_MAX


def test_a_call_routed_before_s_was_learned_is_rerouted() -> None:
    """A call in flight when another call's answer taught S meets WRONG_SHARD with the S
    the client knows already: it goes to its route, not back to its caller."""
    client = ClientIdentity(NODES, user="u")
    in_flight = build.create_key(VOLUME, SHARD_1, "k")
    routed_before = client.route(in_flight)[0]
    assert client.learn_shards(wrong_shard(2))          # another call's answer
    route = client.rerouted(in_flight, wrong_shard(2), routed_before)
    assert route == [shard_address(address, 1) for address in NODES]
    assert client.rerouted(in_flight, wrong_shard(2), route[0]) is None, \
        "sent where it belongs and refused: the answer stands"
    assert client.rerouted(in_flight, om_pb2.OMResponse(status=om_pb2.NOT_LEADER),
                           routed_before) is None
