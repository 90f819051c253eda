"""``om admin audit``: the report-only auditor on each node, and the cluster checks.

Each targeted node runs ``om.integrity.auditor`` over its own store, paced
(``--rows-per-s``), in a worker thread, and re-checks every candidate before
reporting it; it logs each violation in full and exports the counts at /prom
(``om_audit_violations_<category>``). Then this command collects every
node's positions, Raft membership and last verification twice and keeps the
cluster violations both rounds found (``auditor.check_cluster``, ``stable``).
It fixes nothing. Exit status 0 when clean, 1 with any violation or a node
that did not answer.

``--last`` runs nothing: it shows each node's periodic audit (``[auditor]
periodic_interval_s``, ``om.integrity.periodic``) from the metrics the node
returns with ServiceList: its interval, its counters, and its last run's time,
duration and violations by category (each violation is in that node's log).
Exit status 1 when a node did not answer or its last periodic run found
violations.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from om.cli.admin import integrity_rpc as rpc
from om.cli.common import add_target, client_tls, targets
from om.cluster import lifecycle as om_cluster
from om.config import ConfigError
from om.integrity import auditor
from om.integrity.auditor import NodeFacts, Violation
from om.integrity.compare import ReplicaError
from om.protocol import om_pb2

AUDIT_TIMEOUT_S = 3600.0


def register(actions: Any) -> None:
    """Adds ``admin audit``."""
    audit = actions.add_parser("audit", help="the report-only auditor: each node's store, "
                               "then positions, membership and last verification")
    add_target(audit)
    audit.add_argument("--node-id", action="append", default=[],
                       help="audit this node's store (repeatable; default: every node)")
    audit.add_argument("--rows-per-s", type=int, default=0, help="pace (default 50000)")
    audit.add_argument("--lag-max", type=int, default=10_000,
                       help="a follower further behind the highest commit is a violation")
    audit.add_argument("--details-max", type=int, default=100)
    audit.add_argument("--json", action="store_true")
    audit.add_argument("--last", action="store_true",
                       help="run nothing: show each node's last periodic audit")
    audit.add_argument("--timeout", type=float, default=3.0,
                       help="with --last: seconds to wait for each node")
    audit.set_defaults(run=run_audit)


def run_audit(args: argparse.Namespace) -> int:
    """Audits; exit 0 only when every node answered and nothing was found."""
    try:
        addresses = targets(args)
        tls = client_tls(args, addresses)
    except ConfigError as error:
        print(f"om admin audit: {error}", file=sys.stderr)
        return 2
    if args.last:
        infos = om_cluster.node_infos(addresses, args.timeout, tls)
        last = last_periodic(infos, time.time())
        print(json.dumps(last, indent=2) if args.json else _last_text(last))
        return 0 if last["clean"] else 1
    links = {address: rpc.NodeLink(address, tls, AUDIT_TIMEOUT_S) for address in addresses}
    try:
        stores = {a: _ask(link, args, facts_only=False) for a, link in links.items()}
        again = {a: _ask(link, args, facts_only=True) for a, link in links.items()}
    finally:
        for link in links.values():
            link.close()
    report = _report(stores, again, args)
    print(json.dumps(report, indent=2) if args.json else _text(report))
    return 0 if report["clean"] else 1


def _ask(link: rpc.NodeLink, args: argparse.Namespace,
         facts_only: bool) -> om_pb2.AuditReplicaResponse | str:
    """One node's audit (or only its facts); the error text when it did not answer."""
    body = om_pb2.AuditReplicaRequest(rows_per_s=args.rows_per_s,
                                      details_max=args.details_max, facts_only=facts_only)
    request = om_pb2.OMRequest(cmd_type=om_pb2.AuditReplica, audit_replica=body)
    try:
        first = link.call(om_pb2.OMRequest(cmd_type=om_pb2.ServiceList,
                                           service_list=om_pb2.ServiceListRequest()))
        node_id = first.service_list.nodes[0].node_id if first.service_list.nodes else ""
        if args.node_id and node_id not in args.node_id:
            request.audit_replica.facts_only = True
        return link.call(request).audit_replica
    except ReplicaError as error:
        return str(error)


def _facts(answers: dict[str, om_pb2.AuditReplicaResponse | str]) -> list[NodeFacts]:
    return [NodeFacts(a.node_id, a.applied_index, a.commit_index, frozenset(a.members),
                      a.verify_position, {r.table: r.root for r in a.verify_roots})
            for a in answers.values() if not isinstance(a, str)]


def _report(stores: dict[str, om_pb2.AuditReplicaResponse | str],
            again: dict[str, om_pb2.AuditReplicaResponse | str],
            args: argparse.Namespace) -> dict[str, Any]:
    first, second = _facts(stores), _facts(again)
    configured = frozenset().union(*(f.raft_members for f in first)) if first else frozenset()
    cluster = auditor.stable(auditor.check_cluster(first, configured, args.lag_max),
                             auditor.check_cluster(second, configured, args.lag_max))
    nodes = [_node(address, answer) for address, answer in sorted(stores.items())]
    clean = not cluster and all(n.get("violations_total", 1) == 0 and "error" not in n
                                for n in nodes)
    return {"clean": clean, "nodes": nodes, "cluster": [_violation(v) for v in cluster],
            "cluster_counts": _counts(cluster)}


def _node(address: str, answer: om_pb2.AuditReplicaResponse | str) -> dict[str, Any]:
    if isinstance(answer, str):
        return {"address": address, "error": answer}
    entry: dict[str, Any] = {"address": address, "node_id": answer.node_id,
                             "replica_state": answer.replica_state}
    if not answer.counts:
        return {**entry, "store": "not audited", "violations_total": 0}
    return {**entry, "rows_checked": answer.rows_checked,
            "duration_s": round(answer.duration_s, 3), "candidates": answer.candidates,
            "cleared": answer.cleared, "unsettled": answer.unsettled,
            "counts": dict(sorted(answer.counts.items())),
            "violations_total": sum(answer.counts.values()),
            "violations": [{"category": v.category, "subject": v.subject, "detail": v.detail}
                           for v in answer.violations]}


def _violation(violation: Violation) -> dict[str, str]:
    return {"category": violation.category, "subject": violation.subject,
            "detail": violation.detail}


def _counts(violations: list[Violation]) -> dict[str, int]:
    counts = dict.fromkeys(auditor.CLUSTER_CATEGORIES, 0)
    for violation in violations:
        counts[violation.category] += 1
    return counts


def _text(report: dict[str, Any]) -> str:
    lines: list[str] = []
    for node in report["nodes"]:
        name = node.get("node_id") or node["address"]
        if "error" in node:
            lines.append(f"{name}: did not answer: {node['error']}")
            continue
        if "counts" not in node:
            lines.append(f"{name}: store not audited")
            continue
        total = node["violations_total"]
        lines.append(f"{name}: {node['rows_checked']} rows in {node['duration_s']} s: "
                     + ("clean" if not total else f"{total} violations")
                     + f" ({node['candidates']} candidates, {node['cleared']} cleared in "
                     f"flight, {node['unsettled']} unsettled)")
        lines += [f"  {category}: {count}" for category, count in node["counts"].items()
                  if count]
        lines += [f"    {v['category']} {v['subject']}: {' '.join(v['detail'].split())}"
                  for v in node["violations"]]
    cluster = report["cluster"]
    lines.append("cluster: clean" if not cluster else f"cluster: {len(cluster)} violations")
    lines += [f"  {v['category']} {v['subject']}: {v['detail']}" for v in cluster]
    return "\n".join(lines)


# ------------------------------------------------------------- --last ---

_PERIODIC = "om_audit_periodic_"
_COUNTERS = ("runs", "skipped", "not_follower", "stopped", "failures")


def last_periodic(infos: list[om_pb2.NodeInfo], now_s: float) -> dict[str, Any]:
    """Each node's periodic audit, from the metrics in its NodeInfo (``om.node.integrity``'s
    ``om_audit_periodic_*``): clean unless a node did not answer or its last run found
    violations."""
    nodes = [_periodic_node(info, now_s) for info in infos]
    clean = all("error" not in n and (n["last"] or {}).get("violations_total", 0) == 0
                for n in nodes)
    return {"clean": clean, "nodes": nodes}


def _periodic_node(info: om_pb2.NodeInfo, now_s: float) -> dict[str, Any]:
    entry: dict[str, Any] = {"node_id": info.node_id, "address": info.address,
                             "role": info.role}
    if not info.node_id:
        return {**entry, "error": info.role}
    metrics: Mapping[str, float] = info.metrics
    interval = metrics.get(_PERIODIC + "interval_seconds", 0.0)
    entry["periodic"] = {"interval_s": interval,
                         "running": bool(metrics.get(_PERIODIC + "running", 0.0)),
                         **{name: int(metrics.get(f"{_PERIODIC}{name}_total", 0.0))
                            for name in _COUNTERS}}
    finished = metrics.get(_PERIODIC + "last_run_timestamp_seconds")
    if finished is None:
        return {**entry, "last": None}
    counts = {c: int(metrics.get(f"{_PERIODIC}violations_{c}", 0.0))
              for c in auditor.STORE_CATEGORIES}
    return {**entry, "last": {
        "finished_at": datetime.fromtimestamp(finished, UTC).isoformat(timespec="seconds"),
        "finished_at_s": finished, "age_s": round(max(0.0, now_s - finished), 1),
        "duration_s": round(metrics.get(_PERIODIC + "last_duration_seconds", 0.0), 3),
        "rows_checked": int(metrics.get(_PERIODIC + "last_rows_checked", 0.0)),
        "counts": counts, "violations_total": sum(counts.values())}}


def _last_text(report: dict[str, Any]) -> str:
    lines: list[str] = []
    for node in report["nodes"]:
        name = node["node_id"] or node["address"]
        if "error" in node:
            lines.append(f"{name}: did not answer: {node['error']}")
            continue
        periodic, last = node["periodic"], node["last"]
        head = f"{name} ({node['role']}): periodic audit "
        head += (f"every {periodic['interval_s']:g} s" if periodic["interval_s"]
                 else "off")
        if last is None:
            head += ": no run yet"
        else:
            total = last["violations_total"]
            head += (f": last ended {last['finished_at']} ({last['age_s']:g} s ago), "
                     f"{last['rows_checked']} rows in {last['duration_s']:g} s: "
                     + ("clean" if not total else f"{total} violations"))
        lines.append(head + ("; one running now" if periodic["running"] else ""))
        lines.append("  runs {runs}, skipped {skipped}, not started (not a follower) "
                     "{not_follower}, stopped (became leader) {stopped}, failed "
                     "{failures}".format(**periodic))
        if last is not None and last["violations_total"]:
            lines += [f"  {category}: {count}" for category, count in last["counts"].items()
                      if count]
            lines.append(f"  (each violation in full: {name}'s log, "
                         "'periodic audit violation ...')")
    return "\n".join(lines)
