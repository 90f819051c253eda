"""File-system-optimized buckets (docs/FSO.md): paths and layouts, the key handlers of an
FSO bucket, and its directory and file rows.

Modules:

* ``fs.py``
* ``fso_keys.py``
* ``fso_rows.py``
"""
