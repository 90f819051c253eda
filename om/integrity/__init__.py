"""Knowing that replicas hold what they claim: Merkle trees, scans, the auditor.

* ``merkle``: the sans-IO tree per table, its diff, the majority vote and the
  row-level comparison of differing ranges.
* ``scan``: the store side: a tree of every table from a read view (a
  checkpoint, so concurrent applies cannot tear it), rate-limited; the trees
  persisted beside the database; the rows of given key ranges.
* ``auditor``: report-only checks of the invariants the handlers and apply
  keep (bucket and volume usage, parents exist, ids below the managed index,
  expired retry-cache rows purged), re-checked before they are reported.

This package decides and reports; it never changes a replica. Repair (which
must not advance a replica's markers past a range it could not fill) and the
wiring into Raft, RPC and the CLI build on these pieces.
"""
