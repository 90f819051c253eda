"""Knowing that replicas hold what they claim: digests compared, scrubbed, audited.

The digests themselves are the state machine's (``om.statemachine.digests``: kept
by every write, in its write batch). Here:

* ``digest_tree``: the sans-IO tree above a table's digest leaves, and the
  level-by-level descent to the leaves that differ;
* ``vote``: the majority vote per table, and the row-level comparison;
* ``verifier``: a node's verifications: a checkpoint taken in apply at each verify
  entry, its leaf rows summed into roots behind it, levels and leaf rows served;
* ``compare``: the vote over every node's roots, the descent, the named rows, and
  digest drift told apart from divergence; ``remote``: another node's digests over
  the integrity requests;
* ``continuous``: every node compares itself with its peers at each verification
  and marks itself when outvoted;
* ``scrub``: every leaf recomputed from its rows in a process of its own, drift
  mended;
* ``marker``: the file that keeps a diverged node out of service;
* ``repair``: the only module that changes a replica's rows from outside: a
  stopped node's differing leaves copied from peers' checkpoints, each verified
  against the majority's digest; the marker is cleared only when every root
  matches again;
* ``auditor``: report-only checks of the invariants the handlers and apply keep
  (bucket and volume usage, parents exist, ids below the managed index, expired
  retry-cache rows purged), re-checked before they are reported; ``audit_scan``
  and ``periodic`` run it; ``service``: a node's answers to the integrity requests;
  ``scan``: paced scans.

docs/operations/verify-and-repair.md and docs/operations/audit.md are the operator's view.
"""
