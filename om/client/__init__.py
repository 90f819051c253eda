"""Clients of the OM wire protocol.

* ``OMClient``: blocking, plain sockets (cooperative under gevent, so locust
  users can use it), one request at a time per connection.
* ``AsyncOMClient``: asyncio, many requests in flight on one connection.

Both retry with the *same* call id: on NOT_LEADER they follow the suggested
leader, on LEADER_NOT_READY / SERVER_BUSY / a lost connection they back off
and try the next node, until an overall deadline. Non-OK statuses become
typed exceptions (``om.client.errors``); TLS settings that cannot work with the
OM (plain TCP to a TLS port or the reverse, an untrusted or refused certificate)
raise ``OMTlsError`` at once (``om.client.diagnosis``).
"""

from om.client.aio import AsyncOMClient
from om.client.blocking import OMClient
from om.client.diagnosis import OMTlsError
from om.client.errors import OMClientError, OMConnectionError, OMStatusError

__all__ = ["AsyncOMClient", "OMClient", "OMClientError", "OMConnectionError", "OMStatusError",
           "OMTlsError"]
