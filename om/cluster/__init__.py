"""Local-cluster tooling: real OM processes on this host, started, stopped, grown and
seeded from the outside. Nothing here runs inside a node.

* ``lifecycle.py``: ``om cluster up|status|down``, the ``Cluster`` a tool or test drives;
* ``membership.py``: add, decommission and maintenance of a running ring;
* ``ring.py``: the ring as ``cluster.toml`` records it, kept true after each change;
* ``preload.py``: ``om freon generate``, a namespace written into a node's store offline.
"""
