"""Which certificate a tool presents: ``--cert/--key/--ca``, else the one named by the
cluster the tool talks to (``--config``/``--dir``, else the last cluster started, when
its addresses are the ones targeted), else none (plain TCP). Tools without flags (the
locust file) read ``$OM_CERT/$OM_KEY/$OM_CA`` or ``$OM_CLUSTER_DIR`` instead
(``environment_tls``).

``om sh`` may act with a delegation token instead (``client_credentials``):
``--token FILE``, else the file ``$OM_TOKEN_FILE`` names (as Hadoop's tools read
``$HADOOP_TOKEN_FILE_LOCATION``). A given certificate (``--cert``) wins and the
token is not sent; otherwise the client presents no certificate, verifies the
OM against the CA (``--ca``, else the cluster's, found as above) and sends the
token with every request."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from om import config as om_config
from om.client.identity import Tls, split_addresses
from om.cluster import lifecycle as om_cluster
from om.config import ConfigError
from om.protocol import om_pb2
from om.protocol.token_format import TokenFormatError
from om.security.tls import ClientTls
from om.security.token_client import ServerTrust, read_token_file

TOKEN_FILE_ENV = "OM_TOKEN_FILE"


def add_tls_flags(parser: argparse.ArgumentParser) -> None:
    """--cert, --key and --ca."""
    parser.add_argument("--cert", type=Path, help="client certificate (PEM; its CN is the user)")
    parser.add_argument("--key", type=Path, help="the certificate's private key (PEM)")
    parser.add_argument("--ca", type=Path, help="the CA that signed the OM's certificate")


def add_dir_flag(parser: argparse.ArgumentParser) -> None:
    """--dir: the cluster directory whose addresses (unless --om) and certificate to use."""
    parser.add_argument("--dir", type=Path, help="a cluster directory (om cluster up --dir): "
                        "its addresses, unless --om, and its certificate (default: those of "
                        "the last cluster started, when it serves the addresses)")


def target_addresses(args: argparse.Namespace, default: list[str]) -> list[str]:
    """--om, else the nodes of the cluster in --dir, else ``default``."""
    if args.om:
        return split_addresses(args.om)
    if getattr(args, "dir", None) is not None:
        return [n.address for n in om_config.load(args.dir / "cluster.toml").nodes]
    return default


def add_token_flag(parser: argparse.ArgumentParser) -> None:
    """--token FILE: act with a delegation token instead of a certificate."""
    parser.add_argument("--token", dest="token_file", type=Path, metavar="FILE",
                        help="a delegation token file (om sh token get): act as its owner "
                             f"without a certificate (default: ${TOKEN_FILE_ENV}); needs "
                             "the cluster's CA (--ca, or found like the certificate)")


def client_tls(args: argparse.Namespace, addresses: list[str]) -> ClientTls | None:
    """The certificate to present to ``addresses``; ConfigError when flags are partial."""
    given = (args.cert, args.key, args.ca)
    if any(given):
        if not all(given):
            raise ConfigError("--cert, --key and --ca go together")
        return ClientTls(args.cert, args.key, args.ca)
    return _discovered(args, addresses)


def _discovered(args: argparse.Namespace, addresses: list[str]) -> ClientTls | None:
    """The certificate of the cluster named by --config/--dir, or of the last one started
    when it serves ``addresses``."""
    path = getattr(args, "config", None) or (
        args.dir / "cluster.toml" if getattr(args, "dir", None) else None)
    if path is not None:
        return om_cluster.client_tls(om_config.load(path))
    try:
        last = om_cluster.last()
        if set(addresses) <= set(last.addresses):
            return last.client_tls()
    except (om_cluster.ClusterError, ConfigError):
        pass
    return None


CERT_ENV, KEY_ENV, CA_ENV, CLUSTER_DIR_ENV = "OM_CERT", "OM_KEY", "OM_CA", "OM_CLUSTER_DIR"


def environment_tls(addresses: list[str]) -> ClientTls | None:
    """For tools without flags (the locust file): ``$OM_CERT``, ``$OM_KEY`` and
    ``$OM_CA``, else the certificate of the cluster in ``$OM_CLUSTER_DIR``, else that of
    the last cluster started when it serves ``addresses``, else none."""
    given = [os.environ.get(name, "") for name in (CERT_ENV, KEY_ENV, CA_ENV)]
    if any(given):
        if not all(given):
            raise ConfigError(f"${CERT_ENV}, ${KEY_ENV} and ${CA_ENV} go together")
        return ClientTls(*(Path(path) for path in given))
    directory = os.environ.get(CLUSTER_DIR_ENV, "")
    return _discovered(argparse.Namespace(config=None, dir=Path(directory) if directory
                                          else None), addresses)


def token_file(args: argparse.Namespace) -> Path | None:
    """The delegation token file to act with: --token, else $OM_TOKEN_FILE."""
    given: Path | None = getattr(args, "token_file", None)
    if given is not None:
        return given
    named = os.environ.get(TOKEN_FILE_ENV, "")
    return Path(named) if named else None


def load_token(path: Path) -> om_pb2.TokenProto:
    """The token in ``path``; ConfigError (a usage error) when there is none."""
    try:
        return read_token_file(path)
    except OSError as error:
        raise ConfigError(f"cannot read the token file {path}: {error.strerror}") from None
    except TokenFormatError as error:
        raise ConfigError(f"{path}: {error}") from None


def client_credentials(args: argparse.Namespace, addresses: list[str],
                       ) -> tuple[Tls | None, om_pb2.TokenProto | None]:
    """The TLS settings and the delegation token (if any) to reach ``addresses`` with."""
    path = token_file(args)
    if path is None or args.cert is not None:
        return client_tls(args, addresses), None
    return token_credentials(args, addresses, load_token(path))


def token_credentials(args: argparse.Namespace, addresses: list[str],
                      token: om_pb2.TokenProto) -> tuple[ServerTrust, om_pb2.TokenProto]:
    """TLS that presents no certificate and trusts the cluster's CA, with ``token``."""
    ca: Path | None = args.ca
    if ca is None:
        found = _discovered(args, addresses)
        ca = found.ca_file if found is not None else None
    if ca is None:
        raise ConfigError("a delegation token travels over TLS only: give the cluster's CA "
                          "(--ca), or --dir/--config of the cluster")
    return ServerTrust(ca), token
