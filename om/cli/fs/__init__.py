"""``om fs``: the file-system verbs (``ozone fs``, ``hdfs dfs``) on FSO buckets.

Modules:

* ``shell.py``
"""
