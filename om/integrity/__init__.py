"""Knowing that replicas hold what they claim: Merkle trees, scans, the auditor.

* ``merkle``: the sans-IO tree per table, its diff, the majority vote and the
  row-level comparison of differing ranges.
* ``scan``: the store side: a tree of every table from a read view (a
  checkpoint, so concurrent applies cannot tear it), rate-limited; the trees
  persisted beside the database; the rows of given key ranges.
* ``auditor``: report-only checks of the invariants the handlers and apply
  keep (bucket and volume usage, parents exist, ids below the managed index,
  expired retry-cache rows purged), re-checked before they are reported.

The wiring, on a live cluster (docs/OPERATIONS.md, "Verify, repair and audit"):

* ``verifier``: a node's verifications: a checkpoint taken in apply at each
  verify entry, the trees computed behind it by ``compute`` (a process of its
  own), kept and served to peers;
* ``compare``: the vote over every node's roots, and the descent to rows;
* ``marker``: the file that keeps a diverged node out of service;
* ``repair``: the only module that changes a replica: a stopped node's ranges
  copied from peers' checkpoints, each verified against the majority's tree;
  the marker is cleared only when every root matches again;
* ``service``: a node's answers to the integrity requests; ``audit_scan``: the
  auditor's scan over a checkpoint, in a process of its own;
* ``periodic``: the auditor run now and then on a follower (``[auditor]``), its
  last result persisted and exported as metrics.
"""
