"""Ozone shell addresses: ``[o3://[host[:port]]]/volume[/bucket[/key]]``.

Parsed as Ozone's ``OzoneAddress`` does: the scheme and host are optional,
leading slashes are dropped (``vol1/bucket1`` works too), a bucket address may
end with a slash (``/vol1/bucket1/``) and everything after the bucket is the
key, slashes included. A host (with an optional port, 9862 by default) names
the OM to ask instead of ``--om``.
"""

from __future__ import annotations

from dataclasses import dataclass

from om.cli.sh.options import UsageError

DEFAULT_PORT = 9862
SCHEME = "o3"


class AddressError(UsageError):
    """The address does not name what the command needs."""


@dataclass(frozen=True)
class Address:
    """The parts of an address; empty strings for the parts it leaves out."""

    volume: str
    bucket: str
    key: str
    om_address: str | None  # "host:port" when the address names an OM

    def require(self, kind: str) -> Address:
        """This address when it fits ``kind``; else AddressError with Ozone's message.

        Kinds: root (``volume list``), volume, bucket, key, volume_or_bucket.
        """
        message = _REQUIREMENTS[kind](self)
        if message:
            raise AddressError(message)
        return self


def parse_address(text: str) -> Address:
    """The parts of ``text``; AddressError for a scheme other than o3."""
    scheme, authority, path = _split_uri(text or f"{SCHEME}:///")
    if scheme not in (None, SCHEME):
        raise AddressError(f"Invalid URI, unknown protocol scheme: {scheme}. "
                           f"Use {SCHEME}:// as the scheme")
    volume, _, rest = path.lstrip("/").partition("/")
    bucket, _, key = rest.partition("/")
    return Address(volume, bucket, key, _om_address(authority))


def _split_uri(text: str) -> tuple[str | None, str, str]:
    """(scheme, authority, path), as OzoneAddress.stringToUri splits a string."""
    scheme, start = None, 0
    colon, slash = text.find(":"), text.find("/")
    if colon > 0 and slash == colon + 1:
        scheme, start = text[:colon], colon + 1
    authority = ""
    if text.startswith("//", start) and len(text) - start > 2:
        start += 2
        end = text.find("/", start)
        end = end if end > 0 else len(text)
        authority, start = text[start:end], end
    return scheme, authority, text[start:]


def _om_address(authority: str) -> str | None:
    """The OM "host:port" a URI authority names (port 9862, Ozone's OM RPC port, if none)."""
    if not authority:
        return None
    _, colon, port = authority.rpartition(":")
    return authority if colon and port.isdigit() else f"{authority}:{DEFAULT_PORT}"


def _root(a: Address) -> str:
    if a.volume or a.bucket or a.key:
        return "Invalid URI. Volume/bucket/key elements should not been used"
    return ""


def _volume(a: Address) -> str:
    if a.key or a.bucket:
        return "Invalid volume name. Delimiters (/) not allowed in volume name"
    return "" if a.volume else "Volume name is required"


def _bucket(a: Address) -> str:
    if a.key:
        return "Invalid bucket name. Delimiters (/) not allowed in bucket name"
    if not a.volume:
        return "Volume name is required."
    return "" if a.bucket else "Bucket name is required."


def _key(a: Address) -> str:
    if not a.key:
        return "Key name is missing."
    if not a.volume:
        return "Volume name is missing"
    return "" if a.bucket else "Bucket name is missing"


def _volume_or_bucket(a: Address) -> str:
    if a.key:
        return "Key address is not supported."
    return "" if a.volume else "Volume name is missing."


_REQUIREMENTS = {
    "root": _root,
    "volume": _volume,
    "bucket": _bucket,
    "key": _key,
    "volume_or_bucket": _volume_or_bucket,
}
