"""Importing the adapter leaves the socket module as the standard library made it."""

from __future__ import annotations

import socket
import subprocess
import sys


def test_the_adapter_restores_inet_ntop_that_pysyncobj_replaces() -> None:
    import om.consensus.pysyncobj.raft_log  # noqa: F401  (imports pysyncobj)

    assert socket.inet_ntop(socket.AF_INET, b"\x7f\x00\x00\x01") == "127.0.0.1"
    assert socket.inet_ntop(socket.AF_INET6, b"\x00" * 15 + b"\x01") == "::1"


def test_pysyncobj_alone_breaks_inet_ntop_on_linux() -> None:
    """The red case: without the adapter's fix, the import breaks the function."""
    probe = ("import socket, pysyncobj.tcp_connection\n"
             "try:\n    socket.inet_ntop(socket.AF_INET, bytes(4))\n"
             "except TypeError:\n    print('broken')\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=60, check=True)
    assert result.stdout.strip() == "broken"
