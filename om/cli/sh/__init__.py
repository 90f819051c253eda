"""``om sh``: the Ozone shell's verbs on volumes, buckets, keys, snapshots and tokens,
printing what ``ozone sh`` prints.

Modules:

* ``address.py``
* ``commands.py``
* ``listing.py``
* ``options.py``
* ``ozone_json.py``
* ``shell.py``
* ``snapshot.py``
* ``token.py``
"""
