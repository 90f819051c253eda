"""One OM node, the composition root: the only package that wires the store, the state
machine, the replicator and the request flows together, owns fail-stop, and opens the
client port.

* ``node.py``: the ``Node`` (wiring, fail-stop, the requests outside the flows);
* ``parts.py``: the node's parts (state machine, write path, Raft adapter), picked from
  the configuration once, and the clock and randomness it reads;
* ``rpc.py``, ``accept.py``: the client port (TCP or TLS, paced handshakes);
* ``connections.py``, ``intake.py``: a client connection's framing, bounds and hand-off;
* ``front_worker.py`` (one worker process), ``front_pool.py`` (the node's set of them);
* ``shard_process.py`` (shard k >= 1's process), ``shard_pool.py`` (the node's start and
  stop of them), with ``shards`` > 1 (docs/SHARDS.md);
* ``membership.py``, ``transfer.py``: the leader's side of ``om admin om``;
* ``integrity.py``, ``integrity_peers.py``: the node's side of verify, repair and the
  auditor, and its links to its peers for continuous verification;
* ``catchup.py``: a follower's catch-up from a peer's checkpoint files;
* ``peer_answer.py``: one answer off a blocking connection to a peer;
* ``gc_policy.py``: the garbage collector's policy while a node serves.
"""
