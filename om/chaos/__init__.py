"""Pure checkers for Jepsen-style chaos tests of the Ozone Manager.

A harness (not in this package) drives a real cluster with concurrent clients
and a nemesis and records what every client saw as a `history.History`. The
modules here judge such a history and nothing else: no sockets, threads,
processes or files, so every verdict is deterministic and re-checkable from a
saved history.

- `history`: the operation record model and its JSON Lines format.
- `linearizability`: a per-key Wing-Gong/Lowe register checker.
- `checkers`: lost writes, linearizability, exactly-once bounds with a
  retry-evidence gate, replica digests and object-id uniqueness, each
  returning a list of `checkers.Violation`.
"""
