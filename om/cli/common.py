"""What the commands share: which nodes a command talks to, with which certificate or
token, and the table of nodes it prints. Every command imports it; it imports no
command (``om/cli/__init__.py`` registers them all), so the CLI has no import cycle.

Which nodes (``targets``, for ``om admin``): ``--om``, else the nodes of ``--config``
/ ``--dir``, else ``$OM_ADDRESS``, else the last cluster started, else the default
address. ``om sh`` and ``om freon`` take ``--om``, else ``--dir``, else their own
default (``target_addresses``).

Which certificate a tool presents: ``--cert/--key/--ca``, else the one named by the
cluster the tool talks to (``--config``/``--dir``, else the cluster started here most
recently whose current ring holds any targeted address: ``om_cluster.serving``), else
none (plain TCP; a TLS port then says so at once: ``om.client.diagnosis``). Tools
without flags (the locust file) read ``$OM_CERT/$OM_KEY/$OM_CA`` or
``$OM_CLUSTER_DIR`` instead (``om.cluster.credentials.environment_tls``).

``om sh`` may act with a delegation token instead (``client_credentials``):
``--token FILE``, else the file ``$OM_TOKEN_FILE`` names (as Hadoop's tools read
``$HADOOP_TOKEN_FILE_LOCATION``). A given certificate (``--cert``) wins and the
token is not sent; otherwise the client presents no certificate, verifies the
OM against the CA (``--ca``, else the cluster's, found as above) and sends the
token with every request."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from om import config as om_config
from om.client.identity import DEFAULT_ADDRESS, Tls, split_addresses
from om.cluster import lifecycle as om_cluster
from om.cluster.credentials import discovered
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


def add_target(parser: argparse.ArgumentParser) -> None:
    """--om, --config or --dir (one of them), and the certificate flags: whom an ``om
    admin`` command talks to (``targets``)."""
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--om", help="comma-separated OM addresses")
    target.add_argument("--config", type=Path, help="a cluster's TOML configuration")
    target.add_argument("--dir", type=Path, help="a cluster directory (om cluster up --dir)")
    add_tls_flags(parser)


def targets(args: argparse.Namespace) -> list[str]:
    """--om, else --config / --dir, else $OM_ADDRESS, else the last cluster, else the default."""
    if args.om:
        return split_addresses(args.om)
    if args.config or args.dir:
        path = args.config or args.dir / "cluster.toml"
        return [n.address for n in om_config.load(path).nodes]
    if "OM_ADDRESS" in os.environ:
        return split_addresses(os.environ["OM_ADDRESS"])
    try:
        return om_cluster.last().addresses
    except om_cluster.ClusterError:
        return [DEFAULT_ADDRESS]


def target_infos(args: argparse.Namespace, command: str) -> list[om_pb2.NodeInfo] | None:
    """Every targeted node's view, or None after printing a configuration error."""
    try:
        addresses = targets(args)
        tls = client_tls(args, addresses)
    except ConfigError as error:
        print(f"om admin {command}: {error}", file=sys.stderr)
        return None
    return om_cluster.node_infos(addresses, args.timeout, tls)


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
    """The certificate of the cluster named by --config/--dir, or of the cluster started
    here whose current ring holds any of ``addresses``."""
    path = getattr(args, "config", None) or (
        args.dir / "cluster.toml" if getattr(args, "dir", None) else None)
    return discovered(path, addresses)


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


# ------------------------------------------------------------------ the node table ---

_COLUMNS = ("node_id", "address", "role", "membership", "term", "commit_index", "match_index",
            "applied_index", "execution", "http_address")


def ring_infos(cluster: om_cluster.Cluster, timeout_s: float = 3.0) -> list[om_pb2.NodeInfo]:
    """Every node of the ring as ``cluster.toml`` records it: each running node's own
    view; a stopped one in maintenance as MAINTENANCE; each decommissioned id last."""
    config = cluster.config
    infos = om_cluster.node_infos([n.address for n in config.nodes], timeout_s,
                                  cluster.client_tls())
    by_raft = {n.raft_address: n.id for n in config.nodes}
    for node, info in zip(config.nodes, infos, strict=True):
        info.node_id = info.node_id or node.id
        matches = {by_raft.get(key, key): index for key, index in info.match_index.items()}
        info.ClearField("match_index")
        info.match_index.update(matches)   # a node started before a change knows addresses
        if node.maintenance:
            info.membership = "MAINTENANCE"
        elif not info.membership:
            info.membership = "LEARNER" if node.learner else "VOTER"
    infos += [om_pb2.NodeInfo(node_id=gone, role="STOPPED", membership="DECOMMISSIONED")
              for gone in config.decommissioned]
    return infos


def render_table(infos: list[om_pb2.NodeInfo]) -> str:
    """A fixed-width table of the nodes; MATCH_INDEX is the follower's match index as the
    leader sees it ("-" for the leader, or with no leader answering)."""
    leaders = [i for i in infos if i.role == "LEADER"]
    matches = dict(leaders[0].match_index) if len(leaders) == 1 else {}
    return render_rows(_COLUMNS, [[_cell(info, c, matches) for c in _COLUMNS]
                                  for info in infos])


def render_rows(columns: tuple[str, ...], rows: list[list[str]]) -> str:
    """A fixed-width table: the columns' names in upper case, then one line per row."""
    assert all(len(row) == len(columns) for row in rows)
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def _cell(info: om_pb2.NodeInfo, column: str, matches: dict[str, int]) -> str:
    if column == "match_index":
        return str(matches[info.node_id]) if info.node_id in matches else "-"
    return str(getattr(info, column))
