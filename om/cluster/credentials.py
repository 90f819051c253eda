"""Which client certificate a tool uses for a local cluster, found without flags.

``discovered``: the certificate of the cluster whose configuration is named, or of
a cluster started here whose current ring holds one of the addresses.
``environment_tls``: for tools without flags (the locust file): ``$OM_CERT``,
``$OM_KEY`` and ``$OM_CA``, else the cluster in ``$OM_CLUSTER_DIR``, else
``discovered``. Below the CLI, so the benchmarks use it without importing a command.
"""

from __future__ import annotations

import os
from pathlib import Path

from om import config as om_config
from om.cluster import lifecycle as om_cluster
from om.config import ConfigError
from om.security.tls import ClientTls

CERT_ENV, KEY_ENV, CA_ENV, CLUSTER_DIR_ENV = "OM_CERT", "OM_KEY", "OM_CA", "OM_CLUSTER_DIR"


def discovered(config_path: Path | None, addresses: list[str]) -> ClientTls | None:
    """The certificate of the cluster configured in ``config_path``, or of the cluster
    started here whose current ring holds any of ``addresses``."""
    if config_path is not None:
        return om_cluster.client_tls(om_config.load(config_path))
    cluster = om_cluster.serving(addresses)
    try:
        return cluster.client_tls() if cluster is not None else None
    except ConfigError:
        return None   # its configuration changed under us: as if not found


def environment_tls(addresses: list[str]) -> ClientTls | None:
    """``$OM_CERT``, ``$OM_KEY`` and ``$OM_CA``, else the certificate of the cluster in
    ``$OM_CLUSTER_DIR``, else that of a cluster started here serving ``addresses``."""
    given = [os.environ.get(name, "") for name in (CERT_ENV, KEY_ENV, CA_ENV)]
    if any(given):
        if not all(given):
            raise ConfigError(f"${CERT_ENV}, ${KEY_ENV} and ${CA_ENV} go together")
        return ClientTls(*(Path(path) for path in given))
    directory = os.environ.get(CLUSTER_DIR_ENV, "")
    return discovered(Path(directory) / "cluster.toml" if directory else None, addresses)
