"""Bucket requests: one module per request type.

Modules:

* ``create_bucket.py``
* ``delete_bucket.py``
* ``info_bucket.py``
* ``list_buckets.py``
* ``set_bucket_property.py``
"""
