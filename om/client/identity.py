"""What both clients share: where to send, as whom, and how calls are numbered."""

from __future__ import annotations

import getpass
import itertools
import uuid
from collections.abc import Sequence

from om.client.retry_policy import RetryPolicy
from om.protocol import om_pb2
from om.protocol.client_version import CURRENT_VERSION
from om.protocol.shard_routing import request_shard, shard_address
from om.security.tls import ClientTls
from om.security.token_client import ServerTrust

Tls = ClientTls | ServerTrust   # a certificate, or only the CA (with a delegation token)

DEFAULT_ADDRESS = "127.0.0.1:9862"
SHARDS_MAX = 64    # more than any node runs (om.config's bound is lower): a bigger S is
                   # a broken answer, not a route


def split_address(address: str) -> tuple[str, int]:
    """("host", port) from "host:port"."""
    host, _, port = address.rpartition(":")
    return host, int(port)


def split_addresses(text: str) -> list[str]:
    """["host:port", ...] from "host:port,host:port" (blanks and spaces dropped)."""
    return [address.strip() for address in text.split(",") if address.strip()]


READ_MODES = ("linearizable", "local")


class ClientIdentity:
    """A client's addresses, user, retry policy, client id, call-id counter, read mode.

    The client id is a fresh UUID unless given: call ids are unique per client
    id, and the server's retry cache is keyed by the pair. ``read_mode="local"``
    asks for local reads (``OMRequest.local_read``): any node answers a read from
    its own applied state, at once and maybe stale; the default is linearizable.
    With ``tls`` the client presents a certificate and the server takes the user
    from it: the user field is then left empty unless given (a given user that
    is not the certificate's is refused).

    With ``token`` (a delegation token, ``om sh token get``) every request carries
    it, and a server that got no certificate takes the token's owner as the user:
    pair it with ``tls=ServerTrust(ca_file)``, which verifies the server and
    presents no certificate.

    Shards (docs/SHARDS.md): the addresses are the nodes' client addresses (shard 0's).
    A node with S > 1 shards answers a request sent to the wrong shard WRONG_SHARD with
    S; the client learns S from it (``learn_shards``), keeps it, and from then on sends
    each request straight to its bucket's shard on the node it would have asked
    (``route``: ``om.protocol.shard_routing``), so only its first misrouted request
    costs a redirect. At S = 1 (any node without shards) nothing changes.
    """

    def __init__(self, addresses: Sequence[str] = (DEFAULT_ADDRESS,), user: str | None = None,
                 policy: RetryPolicy | None = None, client_id: str | None = None,
                 read_mode: str = "linearizable", tls: Tls | None = None,
                 token: om_pb2.TokenProto | None = None) -> None:
        assert addresses, "a client needs at least one address"
        if read_mode not in READ_MODES:
            raise ValueError(f"read_mode must be one of {READ_MODES}, not {read_mode!r}")
        self.local_reads = read_mode == "local"
        self.addresses = list(addresses)
        self.tls = tls
        self.ssl_context = tls.context() if tls is not None else None
        self.user = user if user is not None else ("" if tls or token else getpass.getuser())
        self.token = token
        self.policy = policy or RetryPolicy()
        self.client_id = client_id or str(uuid.uuid4())
        self._call_ids = itertools.count(1)
        self._current = 0
        self.shards = 1     # S, once a WRONG_SHARD answer told it

    def route(self, request: om_pb2.OMRequest) -> list[str]:
        """Where ``request`` goes: its shard on every node, in the nodes' order (shard 0:
        the client's own list, which NOT_LEADER hints extend)."""
        shard = request_shard(request, self.shards) if self.shards > 1 else 0
        if shard == 0:
            return self.addresses
        return [shard_address(address, shard) for address in self.addresses]

    def rerouted(self, request: om_pb2.OMRequest, response: om_pb2.OMResponse,
                 address: str) -> list[str] | None:
        """Where ``request`` goes next after ``response`` came from ``address``: its route
        when a WRONG_SHARD shows it went to the wrong shard for want of S (this answer
        taught it, or another call's did while this one was in flight, routed before);
        None: the answer stands (a client given a shard's port for a node's gets it)."""
        if response.status != om_pb2.WRONG_SHARD:
            return None
        learned = self.learn_shards(response)
        route = self.route(request)
        return route if learned or address not in route else None

    def learn_shards(self, response: om_pb2.OMResponse) -> bool:
        """Takes S from a WRONG_SHARD answer; whether it changed (then re-route the
        request). An answer without S, with the S known already, or with an S no node
        runs changes nothing: the caller gets WRONG_SHARD."""
        if response.status != om_pb2.WRONG_SHARD or response.shards == self.shards:
            return False
        if not 1 <= response.shards <= SHARDS_MAX:
            return False
        self.shards = response.shards
        return True

    def next_call_id(self) -> int:
        """A new call id for a request this client will send."""
        return next(self._call_ids)

    def stamp(self, request: om_pb2.OMRequest) -> None:
        """Gives ``request`` this client's id, protocol version (CURRENT_VERSION: the server
        refuses an older client what it cannot understand, om/gatekeeper/old_clients.py),
        user, read mode and, unless set, a new call id; every retry reuses them (the
        server ignores local_read on writes)."""
        request.client_id = self.client_id
        request.client_version = CURRENT_VERSION
        request.user = request.user or self.user
        request.local_read = request.local_read or self.local_reads
        if self.token is not None and not request.HasField("token"):
            request.token.CopyFrom(self.token)
        if not request.call_id:
            request.call_id = self.next_call_id()
