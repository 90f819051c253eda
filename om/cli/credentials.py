"""Which certificate a tool presents: ``--cert/--key/--ca``, else the one named by the
cluster the tool talks to (``--config``/``--dir``, else the last cluster started, when
its addresses are the ones targeted), else none (plain TCP)."""

from __future__ import annotations

import argparse
from pathlib import Path

from om import cluster as om_cluster
from om import config as om_config
from om.config import ConfigError
from om.security.tls import ClientTls


def add_tls_flags(parser: argparse.ArgumentParser) -> None:
    """--cert, --key and --ca."""
    parser.add_argument("--cert", type=Path, help="client certificate (PEM; its CN is the user)")
    parser.add_argument("--key", type=Path, help="the certificate's private key (PEM)")
    parser.add_argument("--ca", type=Path, help="the CA that signed the OM's certificate")


def client_tls(args: argparse.Namespace, addresses: list[str]) -> ClientTls | None:
    """The certificate to present to ``addresses``; ConfigError when flags are partial."""
    given = (args.cert, args.key, args.ca)
    if any(given):
        if not all(given):
            raise ConfigError("--cert, --key and --ca go together")
        return ClientTls(args.cert, args.key, args.ca)
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
