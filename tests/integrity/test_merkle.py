"""The Merkle tree: equal rows give equal roots, a diff names exactly what differs."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from om.integrity import merkle
from om.integrity.merkle import KeyRange, MerkleTree, RowDiff, TreeParams
from om.protocol import om_pb2

# Small leaves and fan-out: a few dozen keys already make trees several levels deep.
SMALL = TreeParams(salt=b"test", leaf_bits=1, fanout_bits=1)
TABLE = "keyTable"

keys = st.binary(min_size=0, max_size=6)
values = st.binary(min_size=0, max_size=4)
row_sets = st.dictionaries(keys, values, max_size=60)


def tree(rows: dict[bytes, bytes], params: TreeParams = SMALL) -> MerkleTree:
    return merkle.build(TABLE, sorted(rows.items()), params)


def named(a: dict[bytes, bytes], b: dict[bytes, bytes],
          params: TreeParams = SMALL) -> tuple[list[KeyRange], list[RowDiff]]:
    """The differing ranges of a and b, and the rows in them that differ (b against a)."""
    ranges = merkle.diff(tree(a, params), tree(b, params))
    found: list[RowDiff] = []
    for key_range in ranges:
        found += merkle.compare_rows(TABLE, _within(a, key_range), _within(b, key_range))
    return ranges, found


def _within(rows: dict[bytes, bytes], key_range: KeyRange) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in sorted(rows.items()) if key_range.contains(k)]


def _expected(a: dict[bytes, bytes], b: dict[bytes, bytes]) -> list[RowDiff]:
    found = []
    for key in sorted(a.keys() | b.keys()):
        if key not in b:
            found.append(RowDiff(TABLE, key, "missing", a[key], None))
        elif key not in a:
            found.append(RowDiff(TABLE, key, "extra", None, b[key]))
        elif a[key] != b[key]:
            found.append(RowDiff(TABLE, key, "different", a[key], b[key]))
    return found


# ------------------------------------------------------------ properties ---

@settings(max_examples=150, deadline=None)
@given(row_sets)
def test_equal_rows_give_equal_roots_and_no_diff(rows: dict[bytes, bytes]) -> None:
    shuffled = dict(reversed(list(rows.items())))
    a, b = tree(rows), tree(shuffled)
    assert a.root_hash == b.root_hash
    assert a.rows == len(rows)
    assert merkle.diff(a, b) == []


@settings(max_examples=200, deadline=None)
@given(row_sets, keys, values, st.sampled_from(["change", "add", "delete"]))
def test_a_single_changed_row_is_named_exactly(rows: dict[bytes, bytes], key: bytes,
                                               value: bytes, change: str) -> None:
    changed = dict(rows)
    if change == "delete":
        if not rows:
            return
        key = sorted(rows)[len(key) % len(rows)]
        del changed[key]
        kind = "missing"
    elif change == "add":
        if key in rows:
            return
        changed[key] = value
        kind = "extra"
    else:
        if not rows:
            return
        key = sorted(rows)[len(key) % len(rows)]
        changed[key] = rows[key] + b"!"
        kind = "different"
    ranges, found = named(rows, changed)
    assert len(ranges) == 1
    assert ranges[0].contains(key)
    for side in (tree(rows), tree(changed)):  # the diff went down to the leaves around key
        assert sum(1 for leaf in side.leaves if ranges[0].contains(leaf.start)) <= 2
    assert [(d.key, d.kind) for d in found] == [(key, kind)]
    assert (found[0].expected, found[0].actual) == (rows.get(key), changed.get(key))


@settings(max_examples=150, deadline=None)
@given(row_sets, row_sets)
def test_any_two_row_sets_diff_to_exactly_their_differences(
        a: dict[bytes, bytes], b: dict[bytes, bytes]) -> None:
    _, found = named(a, b)
    assert found == _expected(a, b)


@settings(max_examples=100, deadline=None)
@given(row_sets, st.sampled_from([SMALL, TreeParams(b"x", 0, 1), TreeParams(b"", 3, 2)]))
def test_serialization_round_trips(rows: dict[bytes, bytes], params: TreeParams) -> None:
    original = tree(rows, params)
    message = om_pb2.MerkleTree.FromString(merkle.to_proto(original).SerializeToString())
    assert merkle.from_proto(message) == original


# --------------------------------------------------------------- layout ---

def test_leaves_are_cut_at_keys_so_an_insert_changes_one_leaf() -> None:
    rows = {f"/vol/bucket/key{i:05d}".encode(): b"v" for i in range(2000)}
    params = TreeParams(salt=b"s", leaf_bits=4, fanout_bits=2)
    before = tree(rows, params)
    assert 50 < len(before.leaves) < 250            # about 2000 / 16
    assert before.root.level >= 3
    after = tree({**rows, b"/vol/bucket/key00000a": b"v"}, params)
    changed = {leaf.hash for leaf in after.leaves} - {leaf.hash for leaf in before.leaves}
    assert len(changed) <= 2                         # one leaf, or two if the key is a cut
    (differing,) = merkle.diff(before, after)
    assert sum(1 for key in rows if differing.contains(key)) < 100


def test_an_empty_table_has_one_empty_leaf() -> None:
    empty = tree({})
    assert len(empty.leaves) == 1
    assert (empty.root.start, empty.root.end, empty.rows) == (b"", None, 0)
    ranges, found = named({}, {b"k": b"v"})
    assert ranges == [KeyRange(TABLE, b"", None)]
    assert found == [RowDiff(TABLE, b"k", "extra", None, b"v")]


def test_the_salt_moves_the_boundaries() -> None:
    rows = {bytes([i, j]): b"" for i in range(20) for j in range(20)}
    a = tree(rows, TreeParams(b"one", 2, 1))
    b = tree(rows, TreeParams(b"two", 2, 1))
    assert [leaf.start for leaf in a.leaves] != [leaf.start for leaf in b.leaves]


def test_trees_of_other_tables_or_parameters_are_not_comparable() -> None:
    a = tree({b"k": b"v"})
    with pytest.raises(ValueError, match="not comparable"):
        merkle.diff(a, merkle.build("volumeTable", [(b"k", b"v")], SMALL))
    with pytest.raises(ValueError, match="not comparable"):
        merkle.diff(a, tree({b"k": b"v"}, TreeParams(b"other", 1, 1)))


def test_rows_must_come_in_key_order() -> None:
    with pytest.raises(AssertionError, match="increasing key order"):
        merkle.build(TABLE, [(b"b", b""), (b"a", b"")], SMALL)


# -------------------------------------------------------- serialization ---

def _message(rows: dict[bytes, bytes]) -> om_pb2.MerkleTree:
    return merkle.to_proto(tree(rows))


ROWS = {bytes([i]): bytes([i]) for i in range(40)}


def test_a_tree_whose_leaves_do_not_add_up_to_its_root_is_refused() -> None:
    message = _message(ROWS)
    message.leaves[1].hash = bytes(32)
    with pytest.raises(ValueError, match="do not add up"):
        merkle.from_proto(message)


def test_a_tree_with_a_leaf_start_that_is_no_boundary_is_refused() -> None:
    message = _message(ROWS)
    starts = {leaf.start for leaf in message.leaves}
    inner = next(key for key in sorted(ROWS) if key not in starts and key > message.leaves[1].start)
    message.leaves[1].start = inner
    with pytest.raises(ValueError, match="not a boundary"):
        merkle.from_proto(message)


def test_a_tree_with_bad_parameters_or_no_leaves_is_refused() -> None:
    message = _message(ROWS)
    message.fanout_bits = 0
    with pytest.raises(ValueError, match="bad parameters"):
        merkle.from_proto(message)
    with pytest.raises(ValueError, match="empty key"):
        merkle.from_proto(om_pb2.MerkleTree(table=TABLE, leaf_bits=1, fanout_bits=1))


def test_a_forest_round_trips_and_refuses_a_repeated_table() -> None:
    volumes = merkle.build("volumeTable", [], SMALL)
    forest = merkle.Forest(7, 2, {TABLE: tree(ROWS), "volumeTable": volumes})
    message = merkle.forest_to_proto(forest)
    assert [t.table for t in message.trees] == sorted(forest.trees)
    again = merkle.forest_from_proto(om_pb2.TableTrees.FromString(message.SerializeToString()))
    assert again == forest
    assert again.roots() == forest.roots()
    message.trees.append(message.trees[0])
    with pytest.raises(ValueError, match="two trees"):
        merkle.forest_from_proto(message)


# -------------------------------------------------------------- majority ---

A, B, C = b"a" * 32, b"b" * 32, b"c" * 32


def test_three_agreeing_nodes_are_clean() -> None:
    verdict = merkle.majority({n: {TABLE: A, "volumeTable": B} for n in ("om1", "om2", "om3")})
    assert verdict.clean
    assert verdict.tables[TABLE].agree == {"om1", "om2", "om3"}
    assert verdict.tables[TABLE].root == A


def test_one_node_off_is_the_minority() -> None:
    verdict = merkle.majority({"om1": {TABLE: A, "volumeTable": B},
                               "om2": {TABLE: A, "volumeTable": B},
                               "om3": {TABLE: C, "volumeTable": B}})
    assert not verdict.clean
    assert verdict.minority == {"om3"}
    assert verdict.tables[TABLE].root == A
    assert verdict.tables[TABLE].agree == {"om1", "om2"}
    assert verdict.tables["volumeTable"].minority == frozenset()
    assert verdict.no_majority == []


def test_three_different_roots_have_no_majority() -> None:
    verdict = merkle.majority({"om1": {TABLE: A}, "om2": {TABLE: B}, "om3": {TABLE: C}})
    table = verdict.tables[TABLE]
    assert verdict.no_majority == [TABLE]
    assert table.root is None
    assert table.minority == frozenset()
    assert dict(table.groups) == {A: {"om1"}, B: {"om2"}, C: {"om3"}}
    assert verdict.minority == frozenset()  # nobody to blame: nothing may be repaired
    assert not verdict.clean


def test_a_node_without_the_table_counts_against_it() -> None:
    verdict = merkle.majority({"om1": {TABLE: A}, "om2": {TABLE: A}, "om3": {}})
    assert verdict.minority == {"om3"}
    verdict = merkle.majority({"om1": {TABLE: A}, "om2": {}, "om3": {}})
    assert verdict.no_majority == [TABLE]


def test_silent_nodes_count_against_a_majority() -> None:
    assert merkle.majority({"om1": {TABLE: A}, "om2": {TABLE: A}}, cluster_size=3).clean
    verdict = merkle.majority({"om1": {TABLE: A}, "om2": {TABLE: B}}, cluster_size=3)
    assert verdict.no_majority == [TABLE]


# ------------------------------------------------------- row comparison ---

def test_compare_rows_names_missing_extra_and_different() -> None:
    expected = [(b"a", b"1"), (b"b", b"2"), (b"d", b"4")]
    actual = [(b"b", b"2"), (b"c", b"3"), (b"d", b"5")]
    assert merkle.compare_rows(TABLE, expected, actual) == [
        RowDiff(TABLE, b"a", "missing", b"1", None),
        RowDiff(TABLE, b"c", "extra", None, b"3"),
        RowDiff(TABLE, b"d", "different", b"4", b"5"),
    ]


def test_key_ranges_are_half_open() -> None:
    key_range = KeyRange(TABLE, b"b", b"d")
    assert [k for k in (b"a", b"b", b"c", b"d") if key_range.contains(k)] == [b"b", b"c"]
    assert KeyRange(TABLE, b"b", None).contains(b"\xff" * 9)
    assert replace(key_range, end=None).contains(b"z")
