"""Load generators and the benchmark driver of the OM.

``om`` imports this package only from the two commands that run it, ``om bench``
(``om/cli/bench.py``) and ``om freon`` (``om/cli/freon.py``); this package uses om's
packages but never its command line, so the two never form a cycle
(tests/test_layering.py holds both rules and says why the edge is declared).

* ``bench.locustfile``: locust users on the blocking ``OMClient`` (gevent, no asyncio).
* ``bench.freon``: ``om freon omkg|ombg|ockrw``, many requests in flight per
  connection on the asyncio client; returns a ``FreonResult``.
* ``bench.ceiling``: the same executor in-process (no RPC, no Raft).
* ``bench.driver``: ``om bench``, every flow on a fresh local cluster, with
  traces (docs/TRACES.md), ``manifest.json`` and ``summary.json``.

Benchmarks live here, never in the test suite: tests check behaviour, not speed.
"""
