"""Multipart upload: initiate, parts, complete, abort, listing and the expiry step.

Modules:

* ``uploads.py``
"""
