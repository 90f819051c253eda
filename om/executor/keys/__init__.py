"""Key requests on object-store buckets (each forwards to ``fso`` or ``multipart`` where the
bucket's layout or the request says so): one module per request type, and retiring a
committed key version to deletedTable.

Modules:

* ``commit_key.py``
* ``create_key.py``
* ``delete_key.py``
* ``delete_open_keys.py``
* ``list_keys.py``
* ``lookup_key.py``
* ``purge_keys.py``
* ``rename_key.py``
* ``retired_keys.py``
"""
