"""The replicated state: the RocksDB store, apply, and what is written beside it.

Invariants (DESIGN.md section 4):

* The leader flow's apply (``apply.py``) is deterministic and dumb: it writes the
  bytes of a batch, adds quota deltas to existing rows, and records the applied
  position, in one RocksDB write batch. It never executes a request, reads a clock,
  or decides anything except whether the position was already applied. The old
  flow's apply (``replicated_apply.py``, kept for side-by-side measurement and the
  flow switch) is the one exception, by design: it executes each request, as
  Ozone's apply does, with the time and index the leader fixed.
* The applied position and the managed index only move forward, and only in the
  same write batch as the data they describe, so a crash leaves all of a batch
  or none of it, and the high-water mark never passes a hole.
* A node that cannot apply a committed batch stops (fail-stop).

Three words, three things: a **Raft snapshot** is what pysyncobj compacts its log
to and ships to a follower that fell behind (``raft_snapshot.py``); an **OM
snapshot** is the user-visible, read-only view of a bucket (``CreateSnapshot``,
``om_snapshot_checkpoints.py``); a **checkpoint** is a RocksDB checkpoint, the
files either of them is made of (``checkpoint_shelf.py``,
``checkpoint_download.py``).

Modules:

* ``store.py``: the RocksDB store, one column family per table, raw bytes.
* ``log_entry.py``: the replicated log entry (tag byte, protobuf).
* ``apply.py``: the leader flow's apply.
* ``replicated_apply.py``, ``double_buffer.py``, ``write_cache.py``: the old flow's
  apply, double buffer and write cache (Ozone's).
* ``digests.py``: the replica's table digests, kept in every change's write batch.
* ``raft_snapshot.py``: Raft snapshots through pysyncobj's serializer hooks.
* ``checkpoint_shelf.py``, ``checkpoint_download.py``: the checkpoints a node keeps
  for followers, and a follower's resumable download of one.
* ``om_snapshot_checkpoints.py``: an OM snapshot's checkpoint on each node, taken
  where the create applies.
"""
