"""One OM node, the composition root: the only package that wires the store, the state
machine, the replicator and the request flows together, owns fail-stop, and opens the
client port.

* ``node.py``: the ``Node`` (wiring, fail-stop, the requests outside the flows);
* ``rpc.py``: the client RPC server (frames over TCP or TLS, back-pressure, limits);
* ``membership.py``, ``transfer.py``: the leader's side of ``om admin om``;
* ``integrity.py``: the node's side of verify, repair and the auditor;
* ``gc_policy.py``: the garbage collector's policy while a node serves.
"""
