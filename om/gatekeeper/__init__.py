"""The gatekeeper's logic: field validation, lock plans and the lock table, the
retry cache, the managed index and authorization. Pure and sans-IO.

The asyncio shell (``om/flows/leader_flow.py``) runs the request template with these
pieces: validate -> preProcess -> authorize -> lock -> execute -> replicate -> unlock
-> reply. Invariants kept here:

* Every field of a request keeps its rule (``validation``) before anything else
  reads it; a refusal carries Ozone's status and names the field.

* Locks are taken in one total order: volume > bucket > key, names sorted
  within a level; the lock table grants FIFO, so no waiter starves.
* A retry of a request (same client id and call id) never executes twice:
  while the first is in flight the retry waits for it; once it committed, the
  retry gets the stored response.
* Managed indexes are handed out strictly increasing and never below the
  highest persisted one.

This package imports no asyncio, pysyncobj or rocksdict (tests/test_layering.py).
"""
