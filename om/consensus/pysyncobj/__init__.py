"""The pysyncobj adapter: the only package that imports pysyncobj.

Importing pysyncobj replaces ``socket.inet_ntop`` in every process with a
Windows-only implementation (``pysyncobj/win_inet_pton.py`` guards only
``inet_pton`` with ``os.name == 'nt'``), which breaks any later caller on Linux,
psutil's connection listing among them. The package imports it once here and
puts the standard function back (tests/consensus/test_pysyncobj_import.py).
"""

import socket

_INET_NTOP = socket.inet_ntop
import pysyncobj.tcp_connection  # noqa: E402, F401  (replaces socket.inet_ntop)

socket.inet_ntop = _INET_NTOP
