"""Client protocol versions (Ozone's ``org.apache.hadoop.ozone.ClientVersion``).

A client says which protocol version it speaks in ``OMRequest.client_version``
(Ozone's ``OMRequest.version``). The names, numbers and meanings are Ozone's:

=================================  =====  ==================================================
version                            wire   meaning
=================================  =====  ==================================================
DEFAULT_VERSION                    0      a client from before the field: it sends none
VERSION_HANDLES_UNKNOWN_DN_PORTS   1      handles the REPLICATION port in DatanodeDetails
ERASURE_CODING_SUPPORT             2      understands erasure-coded keys
BUCKET_LAYOUT_SUPPORT              3      understands OBJECT_STORE and FILE_SYSTEM_OPTIMIZED
                                          bucket layouts (CURRENT_VERSION)
FUTURE_VERSION                     -1     any number above CURRENT_VERSION: a newer client
                                          this server does not know (never on the wire)
=================================  =====  ==================================================

om's client (``om/client``) stamps ``CURRENT_VERSION`` on every request, so an
unstamped request (0) is an older client's, as in Ozone. Whether a request is an
older client's is Ozone's ``ValidationCondition.OLDER_CLIENT_REQUESTS``:
``wire < CURRENT_VERSION``, on the unsigned wire number (Ozone reads the uint32 into a
signed int, so a number above 2^31 - 1 would read as negative there: here it is a
newer client's, as any number above CURRENT_VERSION). What an older client is refused
is ``om/gatekeeper/old_clients.py``'s.
"""

from __future__ import annotations

import enum


class ClientVersion(enum.IntEnum):
    """Ozone's ClientVersion: the protocol versions a client may speak."""

    FUTURE_VERSION = -1
    DEFAULT_VERSION = 0
    VERSION_HANDLES_UNKNOWN_DN_PORTS = 1
    ERASURE_CODING_SUPPORT = 2
    BUCKET_LAYOUT_SUPPORT = 3


# Ozone's CURRENT: the highest version this software knows.
CURRENT_VERSION = int(ClientVersion.BUCKET_LAYOUT_SUPPORT)
assert max(ClientVersion) == CURRENT_VERSION


def is_older(version: int) -> bool:
    """Whether a request stamped ``version`` comes from a client older than this server
    (Ozone's OLDER_CLIENT_REQUESTS: ``version < CURRENT_VERSION``): its old-client
    validators apply. A number above CURRENT_VERSION is FUTURE_VERSION's, a newer
    client's: served as a current one."""
    assert version >= 0, "the wire number is unsigned"
    return version < CURRENT_VERSION
