"""Volume requests: one module per request type, and the questions about a volume's buckets.

Modules:

* ``create_volume.py``
* ``delete_volume.py``
* ``info_volume.py``
* ``list_volume.py``
* ``set_volume_property.py``
* ``volume_buckets.py``
"""
