"""Trees read level by level and a page at a time (``om admin verify`` over RPC).

A fake link answers GetVerifyTrees from in-memory trees through the node's own
pager (``service.level_page``) and refuses, as a node does, any answer over a
frame limit far smaller than a whole tree: the paged diff must still find what
the in-memory diff finds, and no answer may outgrow the limit (without the
page bound the pager would send the whole level and the diff would fail).
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from om.cli.integrity_rpc import NodeLink, RpcReplica, collect_trees
from om.integrity import compare, compute, merkle
from om.integrity.compare import ReplicaError
from om.integrity.merkle import MerkleTree, TreeParams
from om.integrity.service import level_page
from om.protocol import om_pb2

PARAMS = TreeParams(salt=b"paged", leaf_bits=3, fanout_bits=2)
TABLE = "keyTable"
FRAME_BYTES = 2048
ROWS = 6000


class FakeLink:
    """A node's answers to GetVerifyTrees (by level) and ReadVerifyRange, frame-limited."""

    def __init__(self, rows: dict[bytes, bytes]) -> None:
        self.rows = dict(sorted(rows.items()))
        self.tree = merkle.build(TABLE, self.rows.items(), PARAMS)
        self.largest = 0
        self.calls = 0

    def call(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        self.calls += 1
        response = om_pb2.OMResponse(cmd_type=request.cmd_type, status=om_pb2.OK)
        if request.HasField("get_verify_trees"):
            answer = response.get_verify_trees
            answer.state = om_pb2.VERIFY_DONE
            answer.salt, answer.leaf_bits = PARAMS.salt, PARAMS.leaf_bits
            answer.fanout_bits = PARAMS.fanout_bits
            answer.level_page.CopyFrom(level_page(self.tree, request.get_verify_trees.level))
        else:
            body = request.read_verify_range
            keys = [k for k in self.rows if k >= body.start
                    and (not body.HasField("end") or k < body.end)
                    and (not body.HasField("start_after") or k > body.start_after)]
            page = keys[:body.max_rows]
            response.read_verify_range.rows.extend(
                om_pb2.RangeRow(key=k, value=self.rows[k]) for k in page)
            response.read_verify_range.truncated = len(keys) > len(page)
        size = response.ByteSize()
        if size > FRAME_BYTES:
            raise ReplicaError("INVALID_REQUEST response over the frame limit; ask for fewer")
        self.largest = max(self.largest, size)
        return response


def _rows(changed: dict[int, bytes | None] | None = None) -> dict[bytes, bytes]:
    rows = {f"/vol/bkt/k-{i:05d}".encode(): f"value {i}".encode() for i in range(ROWS)}
    for i, value in (changed or {}).items():
        key = f"/vol/bkt/k-{i:05d}".encode()
        if value is None:
            rows.pop(key, None)
        else:
            rows[key] = value
    return rows


def _replica(node_id: str, link: FakeLink) -> RpcReplica:
    return RpcReplica(node_id, cast(NodeLink, link), 7)


def test_a_whole_tree_is_over_the_frame_limit() -> None:
    tree = FakeLink(_rows()).tree
    assert merkle.to_proto(tree).ByteSize() > 20 * FRAME_BYTES


@pytest.mark.parametrize("changed", [
    {4321: b"other"},
    {0: None, 5999: b"x", 3000: None},
    {i: b"many" for i in range(100, 400, 7)},
    {ROWS + 5: b"an extra row past the end"},
])
def test_the_paged_diff_finds_what_the_whole_diff_finds(
        changed: dict[int, bytes | None]) -> None:
    majority, node = FakeLink(_rows()), FakeLink(_rows(changed))
    remote_a = _replica("om1", majority).tree(TABLE)
    remote_b = _replica("om3", node).tree(TABLE)
    assert merkle.diff(remote_a, remote_b) == merkle.diff(majority.tree, node.tree)
    assert merkle.diff(remote_a, remote_b)
    assert max(majority.largest, node.largest) <= FRAME_BYTES


def test_rows_are_named_through_pages_and_no_answer_outgrows_the_frame() -> None:
    majority, node = FakeLink(_rows()), FakeLink(_rows({4321: b"other", 17: None}))
    replicas = {"om1": _replica("om1", majority), "om2": _replica("om2", FakeLink(_rows())),
                "om3": _replica("om3", node)}
    roots = {n: {TABLE: cast(FakeLink, r.link).tree.root_hash} for n, r in replicas.items()}
    found = compare.compare(7, roots, replicas, 3)
    assert not found.problems, found.problems
    assert {(d.node_id, d.row.key, d.row.kind) for d in found.differences} == {
        ("om3", b"/vol/bkt/k-04321", "different"), ("om3", b"/vol/bkt/k-00017", "missing")}
    for link in (majority, node):
        assert 0 < link.largest <= FRAME_BYTES
    # Only the differing subtrees travel: far fewer answers than the tree has leaves.
    assert majority.calls < len(majority.tree.leaves) // 4


def test_a_page_never_holds_more_than_asked() -> None:
    tree: MerkleTree = FakeLink(_rows()).tree
    page = level_page(tree, om_pb2.TreeLevelQuery(table=TABLE, level=0, max_nodes=10))
    assert (len(page.nodes), page.truncated) == (10, True)
    after = level_page(tree, om_pb2.TreeLevelQuery(table=TABLE, level=0, max_nodes=10,
                                                   start_after=page.nodes[-1].start))
    assert after.nodes[0].start > page.nodes[-1].start
    assert [n.start for n in after.nodes] == [n.start for n in tree.leaves[10:20]]
    top = level_page(tree, om_pb2.TreeLevelQuery(table=TABLE, level=99))
    assert [n.hash for n in top.nodes] == [tree.root_hash]
    assert (top.depth, top.rows) == (tree.depth, ROWS)


class ProgressLink:
    """A node computing its trees: ``steps`` answers with more rows hashed, then done
    (``stall`` after ``steps``: it stays computing with no progress)."""

    def __init__(self, steps: int, stall: bool = False) -> None:
        self.steps, self.stall, self.asked = steps, stall, 0

    def call(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        self.asked += 1
        answer = om_pb2.GetVerifyTreesResponse(node_id="om1", state=om_pb2.VERIFY_COMPUTING,
                                               rows_scanned=min(self.asked, self.steps) * 100,
                                               rows_total=10_000)
        if self.asked > self.steps and not self.stall:
            answer.state = om_pb2.VERIFY_DONE
        return om_pb2.OMResponse(status=om_pb2.OK, get_verify_trees=answer)


def test_the_wait_lasts_as_long_as_a_node_advances_and_a_stall_ends_it() -> None:
    seen: list[int] = []
    links = {"slow": cast(NodeLink, ProgressLink(steps=8)),
             "stuck": cast(NodeLink, ProgressLink(steps=2, stall=True))}
    # Each poll is 0.2 s: the slow node takes ~1.6 s, longer than the stall bound, and is
    # waited for since it advances; the stuck one is given up after 0.6 s without progress.
    found = collect_trees(links, 7, stall_s=0.6,
                          on_progress=lambda progress: seen.append(progress.rows_scanned))
    slow, stuck = found["slow"], found["stuck"]
    assert not isinstance(slow, str)
    assert slow.state == om_pb2.VERIFY_DONE
    assert isinstance(stuck, str)
    assert "no progress for 0.6 s" in stuck
    assert "200 rows hashed" in stuck
    assert (min(seen), max(seen)) == (100, 800)


def test_a_timeout_when_given_still_caps_the_whole_wait() -> None:
    found = collect_trees({"slow": cast(NodeLink, ProgressLink(steps=100))}, 7,
                          stall_s=60, timeout_s=0.5)
    assert found["slow"] == "no trees at position 7 within 0.5 s"


def test_the_scan_reports_its_progress_beside_the_trees(tmp_path: Path) -> None:
    out = tmp_path / "trees"
    assert compute.read_progress(out) == (0, 0)          # nothing yet: unknown
    limit = compute.ProgressLimit(compute.progress_path(out), 1000, None)
    limit.charge(1, 10)                                   # the first charge writes at once
    assert compute.read_progress(out) == (1, 1000)
    limit.charge(1500, 10)
    limit.write()
    assert compute.read_progress(out) == (1501, 1501)    # past the estimate: the count
