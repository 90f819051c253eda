"""Request handlers and the pieces they use: pure, sans-IO.

A handler is ``execute(request, view, recorder, ctx) -> OMResponse``:

* ``view`` reads committed state only (there is no write cache at the leader);
* ``recorder`` collects the row changes and quota deltas the request makes;
* ``ctx`` carries what the leader fixed for this request: its managed index
  (from which object ids derive), the time, the user, and the quota that
  in-flight requests have reserved.

Invariants:

* A handler gets only requests whose every field the gate checked
  (``om/gatekeeper/validation.py``); it refuses only what depends on state.
* A handler never mutates anything but ``recorder``. A request that ends in an
  error status leaves the recorder empty (``dispatch`` discards it), so an
  error never writes.
* The caller holds the locks the request's lock plan names, from before
  ``execute`` until its batch is applied; so what ``view`` shows cannot change
  under the handler, except for quota counters, which in-flight requests only
  move through reservations and deltas.

This package imports no asyncio, pysyncobj or rocksdict (tests/test_layering.py).
"""
