"""When and where a client retries: pure, shared by both clients.

A call keeps its call id across every attempt. NOT_LEADER sends the next
attempt straight to the suggested leader; LEADER_NOT_READY, SERVER_BUSY,
REPLICA_DIVERGED (a node verification found in the minority serves nothing)
and a lost connection move to the next node after a backoff that doubles up to
a cap. WRONG_SHARD that teaches the client its node's shard count re-routes the
call at once to its bucket's shard (``reroute``, ``ClientIdentity.learn_shards``).
Past the deadline the last answer (or a connection error) stands.
"""

from __future__ import annotations

from dataclasses import dataclass

from om.protocol import om_pb2

RETRYABLE = frozenset({om_pb2.NOT_LEADER, om_pb2.LEADER_NOT_READY, om_pb2.SERVER_BUSY,
                       om_pb2.REPLICA_DIVERGED})


@dataclass(frozen=True)
class RetryPolicy:
    """How long a call may take in all, and how attempts are spaced."""

    deadline_s: float = 30.0
    attempt_timeout_s: float = 10.0
    backoff_initial_s: float = 0.02
    # A failover takes a few hundred milliseconds (docs/RELIABILITY.md): a longer wait between
    # attempts would mostly add to it.
    backoff_max_s: float = 0.1

    def __post_init__(self) -> None:
        assert self.deadline_s > 0
        assert 0 < self.backoff_initial_s <= self.backoff_max_s


class Attempts:
    """The state of one call's attempts across nodes."""

    def __init__(self, addresses: list[str], current: int, policy: RetryPolicy,
                 started_s: float) -> None:
        assert addresses
        assert 0 <= current < len(addresses)
        self.addresses = addresses
        self.current = current
        self.policy = policy
        self._deadline_s = started_s + policy.deadline_s
        self._backoff_s = policy.backoff_initial_s
        self.retries = 0

    @property
    def address(self) -> str:
        """Where the next attempt goes."""
        return self.addresses[self.current]

    def after_response(self, response: om_pb2.OMResponse, now_s: float) -> float | None:
        """Seconds to wait before retrying, or None when ``response`` is final."""
        if response.status not in RETRYABLE or now_s >= self._deadline_s:
            return None
        if response.status == om_pb2.NOT_LEADER and response.leader_address:
            if response.leader_address not in self.addresses:
                self.addresses.append(response.leader_address)
            hinted = self.addresses.index(response.leader_address)
            if hinted != self.current:
                self.current = hinted
                self.retries += 1
                return 0.0
        return self._next_node(now_s)

    def reroute(self, addresses: list[str]) -> None:
        """Sends the next attempt, at once, to ``addresses`` (the request's shard on every
        node, in the same node order) on the node it would have gone to."""
        assert addresses
        self.addresses = addresses
        self.current %= len(addresses)
        self.retries += 1

    def after_connection_error(self, now_s: float) -> float | None:
        """Seconds to wait before retrying on another node, or None to give up."""
        if now_s >= self._deadline_s:
            return None
        return self._next_node(now_s)

    def _next_node(self, now_s: float) -> float:
        self.current = (self.current + 1) % len(self.addresses)
        self.retries += 1
        delay = min(self._backoff_s, max(self._deadline_s - now_s, 0.0))
        self._backoff_s = min(self._backoff_s * 2, self.policy.backoff_max_s)
        return delay
