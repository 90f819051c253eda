"""``om admin verify`` and ``om admin repair``: compare replicas, repair the minority.

verify: the leader proposes a verify entry through Raft; every node
checkpoints at its position and reads the digests apply kept there; this
command collects the roots, votes per table (a majority of the configured
nodes wins), descends level by level to the differing leaves, reads their rows
and prints them (node, table, key, kind), and marks each node in the minority
diverged (it then refuses clients and leadership). With no majority in some
table it says so and marks nobody. ``--full`` first has every node run a whole
scrub pass (every leaf recomputed from its rows, drift mended), then verifies.

repair: halts the diverged node at a new verify position (through Raft, so
its database is exactly that position), then, on this host, with the node
stopped, copies the differing leaves from the healthy peers' checkpoints at
that position, each verified against the majority's digests, and clears the
node's marker only once its roots equal the majority's
(``om.integrity.repair``). Run it again after a crash or an unrepairable
leaf: it resumes at the same position.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from om import config as om_config
from om.cli.admin import integrity_rpc as rpc
from om.cli.common import add_target, client_tls, targets
from om.cluster import lifecycle as om_cluster
from om.config import ConfigError, ServerConfig
from om.integrity import compare, marker, repair, store_digests, vote
from om.integrity.compare import Comparison, Replica, ReplicaError
from om.integrity.digest_tree import DigestTree
from om.integrity.remote import RemoteReplica, roots_of
from om.protocol import om_pb2
from om.schema.row_digests import key_id
from om.security.tls import ClientTls
from om.statemachine.digests import Digests
from om.statemachine.store import Store

CRASH_ENV = "OM_REPAIR_CRASH_AFTER_LEAVES"   # test hook: die after writing N leaves
CRASH_EXIT = 86
HALT_WAIT_S = 60.0
PROPOSE_S = 120.0
PROGRESS_EVERY_S = 5.0


def register(actions: Any) -> None:
    """Adds ``admin verify`` and ``admin repair``."""
    verify = actions.add_parser("verify", help="compare every replica at one log position "
                                "(the digests apply keeps); name differing rows; mark the "
                                "minority")
    add_target(verify)
    verify.add_argument("--json", action="store_true")
    _add_waits(verify)
    verify.add_argument("--full", action="store_true",
                        help="first a whole scrub pass on every node (each leaf recomputed "
                        "from its rows, drift mended), then the verify")
    verify.add_argument("--rows-per-s", type=int, default=0,
                        help="--full: the scrub's pace (default [verify] scrub_rows_per_s; "
                        "0 there: unpaced)")
    verify.add_argument("--rows-max", type=int, default=compare.ROWS_MAX_DEFAULT,
                        help="differing rows to name at most")
    verify.add_argument("--no-mark", action="store_true",
                        help="report only: do not mark the minority diverged")
    verify.set_defaults(run=run_verify)
    fix = actions.add_parser("repair", help="repair a node marked diverged from the healthy "
                             "replicas (it is stopped meanwhile)")
    add_target(fix)
    fix.add_argument("--node-id", required=True)
    fix.add_argument("--source", help="comma-separated node ids to copy from (default: any "
                     "node holding the majority's rows)")
    fix.add_argument("--json", action="store_true")
    _add_waits(fix)
    fix.add_argument("--start", action="store_true", help="start the node again once repaired "
                     "(a cluster of `om cluster up`, found by --dir or as the last one)")
    fix.set_defaults(run=run_repair)


def _add_waits(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stall-timeout", type=float, default=rpc.STALL_S,
                        help="give a node up once it has not read its digests at the "
                        f"position for this many seconds (default {rpc.STALL_S:g})")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds for the leader to propose the verify entry (default "
                        f"{PROPOSE_S:g}); when given, also a cap on the wait for the digests")


def _propose_s(args: argparse.Namespace) -> float:
    return PROPOSE_S if args.timeout is None else args.timeout


def _collect(args: argparse.Namespace, links: dict[str, rpc.NodeLink],
             position: int) -> dict[str, om_pb2.GetVerifyTreesResponse | str]:
    """Every node's digests at ``position``; a node still reading them is named on stderr
    every ``PROGRESS_EVERY_S``."""
    printed: dict[str, float] = {}

    def show(progress: rpc.Progress) -> None:
        if progress.waited_s - printed.get(progress.address, -PROGRESS_EVERY_S) \
                < PROGRESS_EVERY_S:
            return
        printed[progress.address] = progress.waited_s
        print(f"  {progress.node_id or progress.address}: {progress.state} after "
              f"{progress.waited_s:.0f} s", file=sys.stderr, flush=True)

    return rpc.collect_trees(links, position, args.stall_timeout, args.timeout, show)


# -- verify ------------------------------------------------------------------------------

def run_verify(args: argparse.Namespace) -> int:
    """Verifies every replica; exit 0 only when every node answered and all agree."""
    try:
        addresses = targets(args)
        tls = client_tls(args, addresses)
    except ConfigError as error:
        print(f"om admin verify: {error}", file=sys.stderr)
        return 2
    links = {address: rpc.NodeLink(address, tls,
                                   SCRUB_ANSWER_S if args.full else rpc.READ_ANSWER_S)
             for address in addresses}
    try:
        scrubs = _scrub_all(links, args.rows_per_s) if args.full else {}
        try:
            started = rpc.propose_verify(addresses, tls, _propose_s(args))
        except ReplicaError as error:
            print(f"om admin verify: {error}", file=sys.stderr)
            return 1
        return _verify_at(args, links, started, scrubs)
    finally:
        for link in links.values():
            link.close()


SCRUB_ANSWER_S = 3600.0    # a whole scrub pass answers when it is done


def _scrub_all(links: dict[str, rpc.NodeLink], rows_per_s: int) -> dict[str, Any]:
    """A whole scrub pass on every node at once; what each found (or why it could not)."""
    found: dict[str, Any] = {}
    with ThreadPoolExecutor(max_workers=len(links)) as pool:
        passes = {a: pool.submit(rpc.scrub, link, rows_per_s) for a, link in links.items()}
    for address, future in sorted(passes.items()):
        try:
            answer = future.result()
        except ReplicaError as error:
            found[address] = {"error": str(error)}
            continue
        found[address] = {"node_id": answer.node_id, "position": answer.position,
                          "rows": answer.rows, "seconds": round(answer.duration_s, 2),
                          "drift": [{"table": d.table, "leaf": d.leaf, "rows": d.rows,
                                     "index_rows": d.index_rows} for d in answer.drift]}
    return found


def _verify_at(args: argparse.Namespace, links: dict[str, rpc.NodeLink],
               started: om_pb2.StartVerifyResponse, scrubs: dict[str, Any]) -> int:
    position = started.position
    answers = _collect(args, links, position)
    done = {a: r for a, r in answers.items()
            if not isinstance(r, str) and r.state == om_pb2.VERIFY_DONE}
    replicas: dict[str, Replica] = {r.node_id: RemoteReplica(r.node_id, links[a].call, r)
                                    for a, r in done.items()}
    roots = {r.node_id: roots_of(r) for r in done.values()}
    if not roots:
        print(f"om admin verify: no node has digests at position {position}: "
              f"{_why(answers)}", file=sys.stderr)
        return 1
    found = compare.compare(position, roots, replicas, len(links), args.rows_max)
    links_by_node = {r.node_id: links[a] for a, r in done.items()}
    marked, refused = ({}, {}) if args.no_mark else _mark(found, links_by_node)
    report = _verify_report(started, answers, found, marked, refused)
    if args.full:
        report["scrub"] = scrubs
    print(json.dumps(report, indent=2) if args.json else _verify_text(report))
    return 0 if report["result"] == "clean" else 1


def _mark(found: Comparison, links: dict[str, rpc.NodeLink]
          ) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Tells each diverged node it is outvoted; nobody when a table has no majority."""
    marked: dict[str, list[str]] = {}
    refused: dict[str, str] = {}
    if found.verdict.no_majority:
        return marked, refused
    request = om_pb2.MarkDivergedRequest(position=found.position,
                                         majority_roots=found.majority_roots())
    for node_id in sorted(found.diverged):
        try:
            answer = links[node_id].call(om_pb2.OMRequest(
                cmd_type=om_pb2.MarkDiverged, mark_diverged=request))
            marked[node_id] = list(answer.mark_diverged.tables)
        except ReplicaError as error:
            refused[node_id] = str(error)
    return marked, refused


def _verify_report(started: om_pb2.StartVerifyResponse,
                   answers: dict[str, om_pb2.GetVerifyTreesResponse | str], found: Comparison,
                   marked: dict[str, list[str]], refused: dict[str, str]) -> dict[str, Any]:
    verdict = found.verdict
    result = "clean"
    if verdict.no_majority:
        result = "no_majority"
    elif found.diverged:
        result = "minority"
    elif found.drift:
        result = "drift"
    elif any(isinstance(r, str) or r.state != om_pb2.VERIFY_DONE for r in answers.values()):
        result = "incomplete"
    return {
        "position": started.position, "term": started.term, "result": result,
        "nodes": [_node_entry(address, answer) for address, answer in sorted(answers.items())],
        "tables": {name: {"root": v.root.hex() if v.root else None,
                          "agree": sorted(v.agree), "minority": sorted(v.minority),
                          "groups": {root.hex(): sorted(nodes)
                                     for root, nodes in v.groups.items()}}
                   for name, v in sorted(verdict.tables.items())},
        "no_majority": verdict.no_majority, "minority": sorted(found.diverged),
        "drift": [{"node": d.node_id, "table": d.table, "leaf": d.leaf} for d in found.drift],
        "differences": [{"node": d.node_id, "table": d.row.table, "key": _text(d.row.key),
                         "kind": d.row.kind, "reference": d.reference}
                        for d in found.differences],
        "truncated": found.truncated, "problems": list(found.problems),
        "marked": marked, "mark_refused": refused,
    }


def _node_entry(address: str, answer: om_pb2.GetVerifyTreesResponse | str) -> dict[str, Any]:
    if isinstance(answer, str):
        return {"address": address, "state": "UNAVAILABLE", "detail": answer}
    return {"address": address, "node_id": answer.node_id,
            "state": om_pb2.VerifyState.Name(answer.state).removeprefix("VERIFY_"),
            "read_s": round(answer.compute_s, 3), "replica_state": answer.replica_state,
            "rows": sum(r.rows for r in answer.roots), "detail": answer.detail}


def _verify_text(report: dict[str, Any]) -> str:
    nodes = report["nodes"]
    answered = [n for n in nodes if n["state"] == "DONE"]
    lines = [f"verify at log position {report['position']} (term {report['term']}): digests "
             f"from {len(answered)} of {len(nodes)} nodes"]
    lines += [f"  {n.get('node_id') or n['address']}: {n['state'].lower()}"
              + (f", {n['rows']} rows, digests read in {n['read_s']} s"
                 if n["state"] == "DONE"
                 else f": {n['detail']}")
              + (f" (marked {n['replica_state']})" if n.get("replica_state") else "")
              for n in nodes]
    lines += _verdict_lines(report)
    return "\n".join(lines)


def _verdict_lines(report: dict[str, Any]) -> list[str]:
    result = report["result"]
    if result == "no_majority":
        return [f"no majority in {table}: " + "; ".join(
                    f"{', '.join(nodes)} hold {root[:12]}"
                    for root, nodes in report["tables"][table]["groups"].items())
                for table in report["no_majority"]] + [
                "nothing marked, nothing to repair: no copy can be told right"]
    if result == "clean":
        return [f"all {len(report['nodes'])} nodes agree in {len(report['tables'])} tables"]
    if result == "drift":
        return [f"{d['node']}: digest drift in {d['table']} leaf {d['leaf']} (its rows are the "
                "majority's; the scrub recomputes it: om admin verify --full)"
                for d in report["drift"]]
    if result == "incomplete":
        return [f"the nodes that answered agree in {len(report['tables'])} tables; the "
                "others were not verified"]
    lines = [f"{node} differs from the majority in "
             + ", ".join(t for t, v in report["tables"].items() if node in v["minority"])
             for node in report["minority"]]
    if report["differences"]:
        lines.append(_table(["NODE", "TABLE", "KEY", "KIND"],
                            [[d["node"], d["table"], d["key"], d["kind"]]
                             for d in report["differences"]]))
    lines += [f"(more differing rows than --rows-max {len(report['differences'])})"] \
        if report["truncated"] else []
    lines += [f"not named: {problem}" for problem in report["problems"]]
    lines += [f"{node} marked diverged: it refuses client requests until "
              f"`om admin repair --node-id {node}`" for node in report["marked"]]
    lines += [f"{node} not marked: {why}" for node, why in report["mark_refused"].items()]
    return lines


# -- repair ------------------------------------------------------------------------------

def run_repair(args: argparse.Namespace) -> int:
    """Repairs ``--node-id``; exit 0 once its marker is cleared."""
    try:
        config, directory = _cluster_config(args)
        node_dir = _node_dir(config, args.node_id)
        tls = client_tls(args, [n.address for n in config.nodes])
        found = marker.load(node_dir)
    except (ConfigError, marker.ReplicaHalted) as error:
        print(f"om admin repair: {error}", file=sys.stderr)
        return 2
    if found is None:
        print(f"{args.node_id} carries no replica marker: nothing to repair")
        return 0
    try:
        if found.state == marker.DIVERGED:
            found = _halt(args, config, tls, node_dir)
        result = _repair_stopped(args, config, tls, node_dir, found.position)
    except (ReplicaError, RepairRefused) as error:
        print(f"om admin repair: {error}", file=sys.stderr)
        return 1
    started = _start(directory, args.node_id) if result.cleared and args.start else None
    if args.json:     # one JSON document on stdout, the start's outcome in it
        print(json.dumps({**_repair_report(args.node_id, result), "started": started},
                         indent=2))
    else:
        print(_repair_text(args.node_id, result, args.start))
        if started is not None:
            print(started)
    return 0 if result.cleared else 1


class RepairRefused(Exception):
    """The repair cannot go on (and changed nothing): the message says why."""


def _cluster_config(args: argparse.Namespace) -> tuple[ServerConfig, Path | None]:
    """The cluster's configuration (a repair needs the node's data directory)."""
    if args.config:
        return om_config.load(args.config), None
    directory = args.dir
    if directory is None and not args.om:
        try:
            directory = om_cluster.last().directory
        except om_cluster.ClusterError as error:
            raise ConfigError(str(error)) from None
    if directory is None:
        raise ConfigError("a repair works on the node's files: pass --config or --dir")
    return om_config.load(directory / "cluster.toml"), directory


def _node_dir(config: ServerConfig, node_id: str) -> Path:
    if node_id not in {n.id for n in config.nodes}:
        raise ConfigError(f"no node {node_id!r} in the configuration "
                          f"({[n.id for n in config.nodes]})")
    return config.data_dir / node_id if len(config.nodes) > 1 else config.data_dir


def _halt(args: argparse.Namespace, config: ServerConfig, tls: ClientTls | None,
          node_dir: Path) -> marker.Marker:
    """Proposes the halt entry and waits until the node stopped there."""
    started = rpc.propose_verify([n.address for n in config.nodes], tls, _propose_s(args),
                                 halt_node_id=args.node_id)
    deadline = time.monotonic() + HALT_WAIT_S
    while time.monotonic() < deadline:
        found = marker.load(node_dir)
        if found is not None and found.stops_start and found.position == started.position:
            return found
        time.sleep(rpc.POLL_S)
    raise RepairRefused(f"{args.node_id} did not halt at position {started.position} within "
                        f"{HALT_WAIT_S} s: is it running? (a diverged node must be running to "
                        "halt; start it, then repair again)")


def _repair_stopped(args: argparse.Namespace, config: ServerConfig, tls: ClientTls | None,
                    node_dir: Path, position: int) -> repair.RepairResult:
    peers = {n.id: rpc.NodeLink(n.address, tls, rpc.READ_ANSWER_S)
             for n in config.nodes if n.id != args.node_id}
    try:
        answers = _peer_digests(args, peers, position)
        store = _open_stopped(node_dir / "db", args.node_id)
        try:
            return _repair_with(args, store, node_dir, position, answers, peers,
                                len(config.nodes))
        finally:
            store.close()
    finally:
        for link in peers.values():
            link.close()


def _peer_digests(args: argparse.Namespace, peers: dict[str, rpc.NodeLink],
                  position: int) -> dict[str, om_pb2.GetVerifyTreesResponse]:
    answers = _collect(args, dict(peers), position)
    done = {n: a for n, a in answers.items()
            if not isinstance(a, str) and a.state == om_pb2.VERIFY_DONE}
    if not done:
        raise RepairRefused(f"no healthy peer has digests at position {position}: "
                            f"{_why(answers)}")
    return done


def _open_stopped(path: Path, node_id: str) -> Store:
    """The stopped node's database (its process may take a moment to release it)."""
    deadline = time.monotonic() + HALT_WAIT_S
    while True:
        try:
            return Store(path, sync_writes=True)
        except Exception as error:  # rocksdict raises a bare Exception for a held LOCK
            if "lock" not in str(error).lower() or time.monotonic() > deadline:
                raise RepairRefused(f"cannot open {node_id}'s database {path}: {error}") \
                    from None
            time.sleep(rpc.POLL_S)


def _repair_with(args: argparse.Namespace, store: Store, node_dir: Path, position: int,
                 answers: dict[str, om_pb2.GetVerifyTreesResponse],
                 peers: dict[str, rpc.NodeLink], cluster_size: int) -> repair.RepairResult:
    kept = Digests.attach(store)
    if not kept.complete:
        raise RepairRefused(f"{args.node_id}'s digests are still being built: start it, let "
                            "the build finish (om_digests_complete), then repair")
    theirs = {a.key_id for a in answers.values()}
    if theirs != {key_id(kept.meta.key)}:
        raise RepairRefused("the peers' digests are keyed otherwise than this node's: its "
                            "store is not a copy of theirs (install a snapshot instead)")
    roots = {node: roots_of(answer) for node, answer in answers.items()}
    local = compare.root_bytes(repair.local_roots(store))
    verdict = vote.majority({**roots, args.node_id: local}, cluster_size)
    if verdict.no_majority:
        raise RepairRefused(f"no majority at position {position} in "
                            f"{', '.join(verdict.no_majority)}: nothing repaired")
    replicas = {node: RemoteReplica(node, peers[node].call, answers[node]) for node in answers}
    allowed = set(args.source.split(",")) if args.source else set(replicas)
    sources: dict[str, list[Replica]] = {
        table: [replicas[n] for n in sorted(v.agree) if n in replicas and n in allowed]
        for table, v in verdict.tables.items()}
    majority_roots = {t: v.root for t, v in verdict.tables.items() if v.root is not None}

    def majority_tree(table: str) -> DigestTree:
        holders = [replicas[n] for n in sorted(verdict.tables[table].agree) if n in replicas]
        if not holders:
            raise RepairRefused(f"no reachable peer holds the majority's {table}")
        return holders[0].tree(table)

    result = repair.repair(store, lambda: marker.load(node_dir),
                           lambda found: marker.save(node_dir, found), position,
                           majority_roots, majority_tree, sources, _crash_hook())
    if result.cleared:
        store_digests.forget_up_to(node_dir, position)
        marker.clear(node_dir)
    return result


def _crash_hook() -> Callable[[int], None]:
    """After N leaves, die as a kill -9 would (``OM_REPAIR_CRASH_AFTER_RANGES``, tests)."""
    after = int(os.environ.get(CRASH_ENV, "0") or 0)

    def crash(done: int) -> None:
        if after and done >= after:
            print(f"om admin repair: {CRASH_ENV}={after}: crashing now", file=sys.stderr,
                  flush=True)
            os._exit(CRASH_EXIT)

    return crash


def _repair_report(node_id: str, result: repair.RepairResult) -> dict[str, Any]:
    return {
        "node": node_id, "position": result.position, "cleared": result.cleared,
        "planned": dict(result.planned), "repaired": dict(result.repaired),
        "sources": list(result.sources), "rows_written": result.rows_written,
        "unrepairable": [u.describe() for u in result.unrepairable],
        "differing_after": list(result.differing_after),
    }


def _repair_text(node_id: str, result: repair.RepairResult, starting: bool) -> str:
    planned, repaired = sum(result.planned.values()), sum(result.repaired.values())
    lines = [f"repair of {node_id} at log position {result.position}: {planned} differing "
             f"leaves, {repaired} repaired"
             + (f" from {', '.join(result.sources)}" if result.sources else "")
             + f", {result.rows_written} rows written"]
    if result.cleared:
        lines.append(f"{node_id}'s roots equal the majority's in every table: marker cleared"
                     + ("" if starting else f"; start {node_id} again (it catches up from "
                        "the log)"))
        return "\n".join(lines)
    lines.append(f"{node_id} stays stopped (marker kept):")
    lines += [f"  unrepairable: {u.describe()}" for u in result.unrepairable]
    lines += [f"  {t}: the root still differs from the majority's"
              for t in result.differing_after]
    return "\n".join(lines)


def _start(directory: Path | None, node_id: str) -> str:
    """Starts the repaired node (a cluster of ``om cluster up``); what was done."""
    if directory is None:
        return f"start {node_id} yourself (no cluster directory given)"
    om_cluster.Cluster(directory).start_node(node_id)
    return f"{node_id} started"


# -- helpers -----------------------------------------------------------------------------

def _why(answers: dict[str, om_pb2.GetVerifyTreesResponse | str]) -> str:
    return "; ".join(f"{address}: {a if isinstance(a, str) else a.detail}"
                     for address, a in sorted(answers.items()))


def _text(key: bytes) -> str:
    return key.decode(errors="backslashreplace")


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()
              for r in rows]
    return "\n".join(lines)
