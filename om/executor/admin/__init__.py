"""Cluster administration written through the log: upgrade (prepare, finalize, layout
versions) and the flow switch.

Modules:

* ``flow_switch.py``
* ``upgrade.py``
"""
