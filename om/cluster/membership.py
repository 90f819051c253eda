"""Growing, shrinking and servicing the ring of a cluster that ``om cluster up`` started:
what ``om admin om add | decommission | maintenance`` (``om/cli/admin/membership.py``)
and the chaos suite's membership nemesis run. It starts and stops the node
processes and keeps ``cluster.toml`` true (``om/cluster/ring.py``).

* **add**: the new node starts as a *learner* (pysyncobj's read-only node: it
  takes the leader's snapshot and log, never votes, never leads, refuses
  writes with NOT_LEADER); once its applied index is within ``CATCH_UP_GAP``
  entries of the leader's and at least 90 % of it (etcd's promote rule), it
  stops, the leader commits its addition as a voter (``om/node/membership.py``,
  etcd's strict check: the new ring's quorum must be up) and it restarts as a
  voter from the same journal and database.
* **decommission**: refused for an unknown id, for a ring that would keep one
  voter (a one-node ring runs without Raft here and could not grow again),
  and when the voters that are up without it are fewer than the remaining
  ring's quorum; otherwise leadership moves away if it leads, the leader
  commits the removal, the node stops and its id joins ``decommissioned``
  (a node of that id is refused at start: it never rejoins).
* **maintenance start**: refused unless the voters up and not in maintenance,
  without this one, still form the whole ring's quorum; leadership moves away,
  the node stops and stays a voter, marked ``maintenance`` (``--for``: until
  then). **maintenance end** (or any membership command after the expiry)
  starts it again and waits until it has caught up.

A refusal raises ``Refused`` and changes nothing (except a learner that did
not catch up, which is stopped and dropped).

**A timed-out change is asked about again, never left silent.** Each change
the tools ask of the leader carries a request id (``om/node/membership.py``
makes ChangeMembership idempotent by it). When the leader does not answer in
time (``answer_timeout_s``), the tool says so and resends the same id until it
learns the outcome (the leader answers the recorded outcome: committed or
refused), for up to ``ASK_AGAIN_S``; a change whose outcome is still unknown
then raises ``Unknown``, which says so and leaves ``cluster.toml`` as it was
(an added node stays listed as a stopped learner, a removed one as a member).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from om.client import OMClient, OMClientError
from om.client.retry_policy import RetryPolicy
from om.cluster import lifecycle as om_cluster
from om.cluster import ring as cluster_ring
from om.config import NodeAddress
from om.consensus.pysyncobj.membership import quorum
from om.protocol import om_pb2
from om.security.certificates import CertificateAuthority

CATCH_UP_GAP = 1000        # entries a learner may trail by when it is promoted
CATCH_UP_FRACTION = 0.9    # and at least this share of the leader's commit index (etcd)
POLL_S = 0.2
ANSWER_S = 35.0            # the leader answers once the entry is committed
ASK_AGAIN_S = 120.0        # how long a timed-out change is asked about again


# answers that are no outcome: still pending, or a node that is not the ready leader
# (once the client's deadline left no time to follow its redirect)
_ASK_AGAIN = (om_pb2.TIMEOUT, om_pb2.NOT_LEADER, om_pb2.LEADER_NOT_READY)


class Refused(Exception):
    """A membership command that cannot go on; nothing was changed."""


class Unknown(Refused):
    """A change whose outcome no leader told in time: it may have committed or not."""


# -- add ---------------------------------------------------------------------------------

def add(cluster: om_cluster.Cluster, node: NodeAddress, catch_up_timeout_s: float,
        answer_timeout_s: float = ANSWER_S) -> None:
    """Learner, catch-up, promotion (see the module's docstring)."""
    config = cluster.config
    if node.id in {n.id for n in config.nodes} or node.id in config.decommissioned:
        raise Refused(f"OM:{node.id} is already a member or was decommissioned; ids are "
                      "never reused")
    om_cluster.check_ports_free([node])
    if config.tls.enabled:
        CertificateAuthority.load(cluster.directory / om_cluster.TLS_DIR).issue_server(
            node.id, (node.host,))
    cluster_ring.add_node(cluster.config_path, node, learner=True)
    _start(cluster, node.id, "as a learner")
    try:
        applied, commit = _wait_learner(cluster, node, catch_up_timeout_s)
    except Refused:
        cluster.stop_node(node.id)
        _drop(cluster, node.id)
        raise
    print(f"OM:{node.id} caught up: applied {applied}, the leader {commit}")
    cluster.stop_node(node.id)
    response = _ask_leader(cluster, om_pb2.ChangeMembershipRequest(
        op=om_pb2.ChangeMembershipRequest.ADD, node_id=node.id,
        raft_address=node.raft_address), answer_timeout_s)
    if response.status != om_pb2.OK:
        _drop(cluster, node.id)
        raise Refused(f"{om_pb2.Status.Name(response.status)}: {response.message}")
    cluster_ring.set_fields(cluster.config_path, node.id, learner=False)
    _start(cluster, node.id, "as a voter")
    _wait_caught_up(cluster, node.id, catch_up_timeout_s)
    print(f"OM:{node.id} is a voter, caught up")


def _start(cluster: om_cluster.Cluster, node_id: str, how: str) -> None:
    """Starts a node's process and says what it started and where its log is."""
    process = cluster.start_node(node_id)
    print(f"OM:{node_id} started {how}: pid {process.pid}, `om serve --config "
          f"{cluster.config_path} --node-id {node_id}`, log {cluster.directory / node_id}.log")


def _wait_learner(cluster: om_cluster.Cluster, node: NodeAddress,
                  timeout_s: float) -> tuple[int, int]:
    """(applied, leader's applied) once the learner is close enough to be promoted.

    Applied indexes, not the commit index: Raft's own entries (a membership
    change) are committed but applied by no state machine."""
    deadline = time.monotonic() + timeout_s
    tls = cluster.client_tls()
    while time.monotonic() < deadline:
        learner = om_cluster.node_infos([node.address], 1.0, tls)[0]
        leader = _leader_info(cluster)
        if learner.role != "UNREACHABLE" and leader is not None:
            applied, target = learner.applied_index, leader.applied_index
            if applied >= CATCH_UP_FRACTION * target and target - applied <= CATCH_UP_GAP:
                return applied, target
        try:
            cluster.raise_if_exited()
        except om_cluster.ClusterError as exited:
            raise Refused(f"a node exited while OM:{node.id} caught up: {exited}") from None
        time.sleep(POLL_S)
    raise Refused(f"OM:{node.id} did not catch up within {timeout_s} s as a learner "
                  f"(log: {cluster.directory / (node.id + '.log')}); it is stopped and "
                  "dropped from the ring")


def _drop(cluster: om_cluster.Cluster, node_id: str) -> None:
    """Removes a node that never became a voter from cluster.toml."""
    cluster_ring.remove_node(cluster.config_path, node_id)


# -- decommission --------------------------------------------------------------------------

def decommission(cluster: om_cluster.Cluster, node_id: str,
                 answer_timeout_s: float = ANSWER_S) -> None:
    """Checks, moves leadership away, removes, stops, records (module docstring)."""
    config = cluster.config
    node = _member(cluster, node_id)
    voters = [n for n in config.nodes if not n.learner]
    if not node.learner:
        if len(voters) <= 2:
            raise Refused(f"the ring would keep {len(voters) - 1} voter: a one-node ring runs "
                          "without Raft here and could not grow again (add a node first)")
        remaining = [n for n in voters if n.id != node.id]
        up = _up(cluster, remaining)
        if len(up) < quorum(len(remaining)):
            raise Refused(f"the {len(remaining)} voters left need {quorum(len(remaining))} up; "
                          f"only {sorted(up)} answer")
        _remove(cluster, node, answer_timeout_s)
    cluster.stop_node(node.id)
    cluster_ring.decommission(cluster.config_path, node.id)
    print(f"OM:{node.id} decommissioned: removed from the ring, stopped, never to rejoin")


def _remove(cluster: om_cluster.Cluster, node: NodeAddress, answer_timeout_s: float,
            attempts: int = 3) -> None:
    """Has the leader commit ``node``'s removal, moving leadership away first (again, if
    an election made it the leader in between)."""
    for _ in range(attempts):
        _lead_elsewhere(cluster, node.id)
        response = _ask_leader(cluster, om_pb2.ChangeMembershipRequest(
            op=om_pb2.ChangeMembershipRequest.REMOVE, node_id=node.id,
            raft_address=node.raft_address), answer_timeout_s)
        if response.status == om_pb2.OK:
            return
        if "cannot remove itself" not in response.message:
            break
    raise Refused(f"{om_pb2.Status.Name(response.status)}: {response.message}")


# -- maintenance ---------------------------------------------------------------------------

def maintenance_end(cluster: om_cluster.Cluster, node_id: str,
                    catch_up_timeout_s: float) -> None:
    """Starts the node again and waits until it has caught up."""
    node = _member(cluster, node_id)
    if not node.maintenance:
        raise Refused(f"OM:{node.id} is not in maintenance")
    _end(cluster, node.id, catch_up_timeout_s)


def maintenance_start(cluster: om_cluster.Cluster, node_id: str, duration_s: float) -> None:
    """Checks, moves leadership away, stops the node, marks it (module docstring)."""
    node = _member(cluster, node_id)
    if node.learner or node.maintenance:
        raise Refused(f"OM:{node.id} is {'a learner' if node.learner else 'in maintenance'}")
    voters = [n for n in cluster.config.nodes if not n.learner]
    serving = [n for n in voters if n.id != node.id and not n.maintenance]
    up = _up(cluster, serving)
    if len(up) < quorum(len(voters)):
        raise Refused(f"with OM:{node.id} stopped, {len(up)} of the {len(voters)} voters "
                      f"would be up ({sorted(up)}), below the quorum of "
                      f"{quorum(len(voters))}: a second node in maintenance risks the ring")
    _lead_elsewhere(cluster, node.id)
    cluster.stop_node(node.id)
    until = time.time() + duration_s if duration_s else 0.0
    cluster_ring.set_fields(cluster.config_path, node.id, maintenance=True,
                            maintenance_until=until)
    ends = time.strftime(" until %Y-%m-%d %H:%M:%S", time.localtime(until)) if until else ""
    print(f"OM:{node.id} is in maintenance{ends}: stopped, still a voter")


def _end(cluster: om_cluster.Cluster, node_id: str, timeout_s: float) -> None:
    cluster_ring.set_fields(cluster.config_path, node_id, maintenance=False,
                            maintenance_until=0.0)
    cluster.start_node(node_id)
    _wait_caught_up(cluster, node_id, timeout_s)
    print(f"OM:{node_id} is back from maintenance and caught up")


def end_expired(cluster: om_cluster.Cluster, catch_up_timeout_s: float) -> None:
    """Ends every maintenance whose ``--for`` has run out."""
    for node in cluster.config.nodes:
        if node.maintenance and node.maintenance_until and node.maintenance_until < time.time():
            print(f"OM:{node.id}'s maintenance has expired: ending it")
            _end(cluster, node.id, catch_up_timeout_s)


# -- shared ----------------------------------------------------------------------------------

def _member(cluster: om_cluster.Cluster, node_id: str) -> NodeAddress:
    config = cluster.config
    if node_id in config.decommissioned:
        raise Refused(f"OM:{node_id} was decommissioned already")
    for node in config.nodes:
        if node.id == node_id:
            return node
    raise Refused(f"no OM {node_id!r} in the ring ({', '.join(n.id for n in config.nodes)})")


def _up(cluster: om_cluster.Cluster, nodes: list[NodeAddress]) -> set[str]:
    infos = om_cluster.node_infos([n.address for n in nodes], 2.0, cluster.client_tls())
    return {i.node_id for i in infos if i.role not in ("UNREACHABLE", "") and i.node_id}


def _leader_info(cluster: om_cluster.Cluster) -> om_pb2.NodeInfo | None:
    voters = [n.address for n in cluster.config.nodes if not n.learner and not n.maintenance]
    infos = om_cluster.node_infos(voters, 1.0, cluster.client_tls())
    leaders = [i for i in infos if i.role == "LEADER"]
    return leaders[0] if len(leaders) == 1 else None


def _wait_leader(cluster: om_cluster.Cluster, timeout_s: float = 15.0) -> om_pb2.NodeInfo:
    """The one ready leader, once the voters agree on one."""
    deadline = time.monotonic() + timeout_s
    while (leader := _leader_info(cluster)) is None:
        if time.monotonic() > deadline:
            raise Refused(f"no single ready leader within {timeout_s} s")
        time.sleep(POLL_S)
    return leader


def _ask_leader(cluster: om_cluster.Cluster, body: om_pb2.ChangeMembershipRequest,
                answer_timeout_s: float = ANSWER_S) -> om_pb2.OMResponse:
    """The leader's answer to a change: committed (OK) or refused. A call that times out
    (no answer within ``answer_timeout_s``, the leader's TIMEOUT: still pending, or a
    NOT_LEADER the client had no time left to follow) is said and asked again with the
    same request id until the outcome is known; raises ``Unknown`` when it is not within
    ``ASK_AGAIN_S``."""
    body.request_id = body.request_id or uuid.uuid4().hex
    what = (f"the {'addition' if body.op == om_pb2.ChangeMembershipRequest.ADD else 'removal'}"
            f" of OM:{body.node_id}")
    request = om_pb2.OMRequest(cmd_type=om_pb2.ChangeMembership, change_membership=body)
    deadline = time.monotonic() + ASK_AGAIN_S
    timeout_s, asked = answer_timeout_s, 0
    while True:
        asked += 1
        voters = [n.address for n in cluster.config.nodes
                  if not n.learner and not n.maintenance]
        policy = RetryPolicy(deadline_s=timeout_s + (10 if asked > 1 else 0),
                             attempt_timeout_s=timeout_s)
        try:
            with OMClient(voters, policy=policy, tls=cluster.client_tls()) as client:
                response = client.call_raw(request)
            if response.status not in _ASK_AGAIN:
                if asked > 1:
                    outcome = ("committed" if response.status == om_pb2.OK else
                               f"refused ({om_pb2.Status.Name(response.status)})")
                    print(f"{what} was {outcome}: the leader's answer to request id "
                          f"{body.request_id} on asking again "
                          f"{'(recorded outcome)' if response.change_membership.replayed else ''}"
                          .rstrip())
                return response
            problem = (f"{om_pb2.Status.Name(response.status)} (no leader's answer yet): "
                       f"{response.message}")
        except OMClientError as error:
            problem = f"no answer within {timeout_s} s ({error})"
        if time.monotonic() >= deadline:
            raise Unknown(f"the outcome of {what} is unknown: {problem}; asked {asked} "
                          f"times with request id {body.request_id} over {ASK_AGAIN_S} s. It "
                          "may still commit: see `om admin roles` (MEMBERSHIP) before trying "
                          "again; cluster.toml is unchanged")
        print(f"{what}: {problem}; asking the leader again with request id "
              f"{body.request_id}")
        timeout_s = max(answer_timeout_s, ANSWER_S)
        time.sleep(POLL_S)


def _lead_elsewhere(cluster: om_cluster.Cluster, node_id: str) -> None:
    """Transfers leadership away from ``node_id`` when it leads; waits for another leader."""
    leader = _wait_leader(cluster)
    if leader.node_id != node_id:
        return
    _transfer(cluster, leader, om_pb2.TransferLeadershipRequest(random=True),
              lambda now: now != node_id)


def transfer_to(cluster: om_cluster.Cluster, node_id: str) -> None:
    """Leadership to ``node_id`` (as ``om admin om transfer -n``); Refused when it does not
    lead in time."""
    leader = _wait_leader(cluster)
    _transfer(cluster, leader, om_pb2.TransferLeadershipRequest(node_id=node_id),
              lambda now: now == node_id)


def _transfer(cluster: om_cluster.Cluster, leader: om_pb2.NodeInfo,
              body: om_pb2.TransferLeadershipRequest, done: Callable[[str], bool],
              timeout_s: float = 15.0) -> None:
    request = om_pb2.OMRequest(cmd_type=om_pb2.TransferLeadership, transfer_leadership=body)
    policy = RetryPolicy(deadline_s=12.0, attempt_timeout_s=10.0)
    try:
        with OMClient([leader.address], policy=policy, tls=cluster.client_tls()) as client:
            response = client.call_raw(request)
    except OMClientError as error:
        raise Refused(f"OM:{leader.node_id} did not answer the transfer: {error}") from None
    if response.status != om_pb2.OK:
        raise Refused(f"OM:{leader.node_id} would not hand over: "
                      f"{om_pb2.Status.Name(response.status)}: {response.message}")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = _leader_info(cluster)
        if now is not None and done(now.node_id):
            print(f"leadership moved from OM:{leader.node_id} to OM:{now.node_id}")
            return
        time.sleep(POLL_S)
    raise Refused(f"leadership did not move as asked within {timeout_s} s of "
                  f"OM:{leader.node_id}'s hand-over")


def _wait_caught_up(cluster: om_cluster.Cluster, node_id: str, timeout_s: float) -> None:
    """Until the leader has ``node_id``'s log matched up to the leader's commit index of
    the start, and the node has applied what the leader had applied then."""
    node = next(n for n in cluster.config.nodes if n.id == node_id)
    deadline = time.monotonic() + timeout_s
    target: tuple[int, int] | None = None
    while time.monotonic() < deadline:
        leader = _leader_info(cluster)
        if leader is not None:
            if target is None:
                target = (leader.commit_index, leader.applied_index)
            match = max(leader.match_index.get(node.id, 0),
                        leader.match_index.get(node.raft_address, 0))
            info = om_cluster.node_infos([node.address], 1.0, cluster.client_tls())[0]
            if match >= target[0] and info.applied_index >= target[1]:
                return
        time.sleep(POLL_S)
    raise Refused(f"OM:{node_id} runs but did not catch up within {timeout_s} s "
                  f"(log: {cluster.directory / (node_id + '.log')})")
