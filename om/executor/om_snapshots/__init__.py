"""OM snapshots of a bucket (``om sh snapshot``): create, list, delete, reads through
a snapshot, and what purges must keep for them. Not Raft snapshots (om/consensus)
nor checkpoints (om/statemachine/store.py).

Modules:

* ``snapshots.py``
"""
