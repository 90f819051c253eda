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

Request families, one package each, one module per request type where a type has a
handler of its own: ``volumes``, ``buckets``, ``keys``, ``fso``, ``multipart``,
``om_snapshots``, ``acls``, ``security``, ``admin``. What they share, here:

* ``registry.py``: the table of request types and ``dispatch``;
* ``context.py``: what the leader fixed for a request (``ExecContext``);
* ``change_recorder.py``: the row changes and quota deltas a request makes;
* ``batcher.py``: executed writes into one batch;
* ``errors.py``: ``OMError``, a status a handler raises;
* ``rows.py``, ``acl_rows.py``, ``names.py``, ``listing.py``: reading and encoding rows,
  their ACLs, Ozone's name rules, List* paging;
* ``quota.py``, ``quota_reservations.py``: quota checks and the in-flight reservations.

This package imports no asyncio, pysyncobj or rocksdict (tests/test_layering.py).
"""
