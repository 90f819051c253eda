"""The replicated state: RocksDB tables, apply, and the replicators.

Invariants (DESIGN.md section 4):

* Apply is deterministic and dumb: it writes the bytes of a batch, adds quota
  deltas to existing rows, and records the applied position, in one RocksDB
  write batch. It never executes a request, reads a clock, or decides anything
  except whether the position was already applied.
* The applied position and the managed index only move forward, and only in the
  same write batch as the data they describe, so a crash leaves all of a batch
  or none of it, and the high-water mark never passes a hole.
* A node that cannot apply a committed batch stops (fail-stop).
"""
