"""The vocabulary the executor, the gatekeeper, the state machine and integrity all speak:
what is stored where, and how requests and objects are named. Pure; imports only
``om.protocol``.

* ``tables.py``: the column families and Ozone's key layout;
* ``read_view.py``: the ``ReadView`` port, read access to committed rows;
* ``ids.py``: a request's retry key, the object ids a managed index gives;
* ``fingerprint.py``: what makes a retry the same request (stored with its reply);
* ``seam.py``: the ``Seam`` port, the clocks and randomness the core reads (the node
  picks them once, om/node/parts.py).
"""
