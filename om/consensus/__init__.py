"""Consensus: how a leader gets opaque log entries committed and applied.

* ``port``: the Replicator port the flows use (results, roles, the apply and
  snapshot hooks a node wires in). Entries and snapshots are opaque bytes.
* ``local``: a single node, no Raft: an entry is committed when applied.
* ``pysyncobj``: the Raft adapter, the only code that imports pysyncobj.

This package imports nothing of the flows, the executor or the state machine:
the node passes apply and snapshots in as callbacks (tests/test_layering.py).
"""
