"""What both clients share: where to send, as whom, and how calls are numbered."""

from __future__ import annotations

import getpass
import itertools
import uuid
from collections.abc import Sequence

from om.client.retry_policy import RetryPolicy

DEFAULT_ADDRESS = "127.0.0.1:9862"


def split_address(address: str) -> tuple[str, int]:
    """("host", port) from "host:port"."""
    host, _, port = address.rpartition(":")
    return host, int(port)


def split_addresses(text: str) -> list[str]:
    """["host:port", ...] from "host:port,host:port" (blanks and spaces dropped)."""
    return [address.strip() for address in text.split(",") if address.strip()]


class ClientIdentity:
    """A client's addresses, user, retry policy, client id and call-id counter.

    The client id is a fresh UUID unless given: call ids are unique per client
    id, and the server's retry cache is keyed by the pair.
    """

    def __init__(self, addresses: Sequence[str] = (DEFAULT_ADDRESS,), user: str | None = None,
                 policy: RetryPolicy | None = None, client_id: str | None = None) -> None:
        assert addresses, "a client needs at least one address"
        self.addresses = list(addresses)
        self.user = user or getpass.getuser()
        self.policy = policy or RetryPolicy()
        self.client_id = client_id or str(uuid.uuid4())
        self._call_ids = itertools.count(1)
        self._current = 0

    def next_call_id(self) -> int:
        """A new call id for a request this client will send."""
        return next(self._call_ids)
