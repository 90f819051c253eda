"""Native ACL requests: one module per request type (the rows' rules are
``om/executor/acl_rows.py``).

Modules:

* ``add_acl.py``
* ``get_acl.py``
* ``remove_acl.py``
* ``set_acl.py``
"""
