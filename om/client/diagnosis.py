"""Connection failures that retrying cannot fix, said in one line.

A client whose TLS settings do not match the OM's would otherwise retry until its
deadline and report "no OM answered". These failures are recognised on the first
attempt and raised as ``OMTlsError`` (an ``OMConnectionError``) naming what is
wrong and the flags that fix it:

* plain TCP to a TLS port: the OM closes the connection without a byte; the
  client then probes the port with a TLS handshake (``PROBE_TIMEOUT_S`` at most)
  and, when it answers in TLS, says so;
* TLS to a plain port: the handshake reads a plain frame (OpenSSL's
  WRONG_VERSION_NUMBER and kin, ``PLAIN_REPLIES``);
* an OM certificate the client's CA does not trust: the handshake's verification
  error;
* a client certificate the OM refuses (signed by another CA, expired): the OM
  closes the connection after the handshake, or sends a TLS alert; the client
  checks its own certificate against its CA (``client_certificate_problem``) and
  says which.

A revoked certificate is not a connection failure: the OM answers each request
with UNAUTHORIZED (``om/node/intake.py``), which the client raises as a status.
Anything not recognised here stays an ordinary connection error, retried as
before (a node that closes a connection while stopping is not misconfigured).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl

from om.client.errors import OMConnectionError
from om.client.identity import Tls, split_address
from om.security.certificates import client_certificate_problem
from om.security.tls import ClientTls

PROBE_TIMEOUT_S = 1.0
FLAGS = "--dir DIR of the OM's cluster, or --cert/--key/--ca"
# OpenSSL's reasons for a handshake that read something other than TLS: a plain OM's
# answer to the ClientHello (an INVALID_REQUEST frame)
PLAIN_REPLIES = frozenset({"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE",
                           "PACKET_LENGTH_TOO_LONG"})


class OMTlsError(OMConnectionError):
    """The client's TLS settings cannot work with the OM it reached: not retried."""


class ClosedBeforeReply(ConnectionResetError):
    """The OM closed a connection before sending anything on it (``cause``: how it ended)."""

    def __init__(self, cause: BaseException | None) -> None:
        super().__init__(f"the OM closed the connection before any answer ({cause})")
        self.cause = cause


def handshake_failure(error: ssl.SSLError, address: str, tls: Tls) -> OMTlsError | None:
    """The one-line error for a TLS failure (at the handshake or the first read), or
    None when it may be transient."""
    if isinstance(error, ssl.SSLCertVerificationError):
        return OMTlsError(
            f"the OM at {address} presented a certificate that the CA {tls.ca_file} does not "
            f"trust ({error.verify_message}): give the CA of the OM's cluster ({FLAGS})")
    reason = error.reason or ""
    if reason in PLAIN_REPLIES:
        return OMTlsError(
            f"the OM at {address} serves plain TCP, not TLS ({reason}): drop --cert/--key/--ca "
            "and --token (and --dir of a secure cluster), or give a secure cluster's addresses")
    if "ALERT" in reason:
        return refused_certificate(address, tls, f"it sent the TLS alert {reason}")
    return None


def refused_certificate(address: str, tls: Tls, how: str) -> OMTlsError | None:
    """Why the OM refused this client at the TLS handshake, when the client can tell."""
    if not isinstance(tls, ClientTls):
        if "CERTIFICATE_REQUIRED" not in how:
            return None
        return OMTlsError(f"the OM at {address} requires a client certificate ({how}; "
                          f"it takes no delegation tokens): give one ({FLAGS})")
    problem = client_certificate_problem(tls.cert_file, tls.ca_file)
    if problem is None:
        if "ALERT" not in how:
            return None   # closed for another reason: maybe stopping
        return OMTlsError(f"the OM at {address} refused the client certificate "
                          f"{tls.cert_file} ({how}): give one of its cluster ({FLAGS})")
    return OMTlsError(f"the OM at {address} refused the client certificate {tls.cert_file}: "
                      f"{problem}; ask an administrator for a new one (om admin user add), "
                      f"or give another ({FLAGS})")


def _probe_context() -> ssl.SSLContext:
    """A context that completes a handshake with anyone: a probe, never a channel for data."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _answered_in_tls(error: ssl.SSLError) -> bool:
    """Whether a probe's handshake that failed with ``error`` heard TLS from the peer
    (an alert: it refused the probe, in TLS)."""
    return "ALERT" in (error.reason or "")


def speaks_tls(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether ``address`` answers a TLS handshake (within ``timeout_s``)."""
    host, port = split_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw, \
                _probe_context().wrap_socket(raw, server_hostname=host):
            return True
    except ssl.SSLError as error:
        return _answered_in_tls(error)
    except OSError:
        return False


async def speaks_tls_async(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """``speaks_tls`` for an event loop."""
    host, port = split_address(address)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(
            host, port, ssl=_probe_context(), server_hostname=host), timeout_s)
    except ssl.SSLError as error:
        return _answered_in_tls(error)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError, TimeoutError):
        await asyncio.wait_for(writer.wait_closed(), timeout_s)
    return True


def plain_to_tls(address: str) -> OMTlsError:
    """The error for a plain client that reached a TLS port."""
    return OMTlsError(f"the OM at {address} speaks TLS and this client connected in plain "
                      f"TCP: give it a certificate of the OM's cluster ({FLAGS})")


def closed_before_reply(address: str, tls: Tls | None, cause: BaseException | None,
                        ) -> OMTlsError | None:
    """The one-line error for an OM that closed a TLS connection before any answer, or
    None (a plain client: probe with ``speaks_tls`` first)."""
    assert tls is not None, "a plain client probes the port instead"
    if isinstance(cause, ssl.SSLError):
        return handshake_failure(cause, address, tls)
    return refused_certificate(address, tls, "it closed the connection after the handshake")
