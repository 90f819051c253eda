"""``om admin``: node roles and metrics, verify and audit, users, and the OM ring's
leadership transfer, membership, prepare and upgrade.

Modules:

* ``audit.py``
* ``integrity_rpc.py``
* ``membership.py``
* ``roles.py``
* ``transfer.py``
* ``upgrade.py``
* ``user.py``
* ``verify.py``
"""
