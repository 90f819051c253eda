"""Trees built while streaming into a file equal the in-memory build, level by level."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from om.integrity import merkle, tree_store
from om.integrity.merkle import Node, TreeParams

SMALL = TreeParams(salt=b"store", leaf_bits=1, fanout_bits=1)


def _levels(tree: merkle.TreeView) -> list[list[tuple[bytes, bytes, int, int]]]:
    return [[(n.start, n.hash, n.rows, n.level) for n in tree.nodes(level, b"", None)]
            for level in range(tree.depth + 1)]


def _pages(rows: list[tuple[bytes, bytes]]) -> list[list[tuple[bytes, bytes]]]:
    """``rows`` in pages of uneven sizes (a page may end anywhere in a leaf)."""
    pages, at, size = [], 0, 1
    while at < len(rows):
        pages.append(rows[at:at + size])
        at, size = at + size, size % 5 + 1
    return pages


def _write(path: Path, tables: dict[str, dict[bytes, bytes]],
           params: TreeParams = SMALL) -> tree_store.StoredForest:
    tree_store.write_forest(path, 9, 2, params,
                            [(t, _pages(sorted(rows.items())))
                             for t, rows in sorted(tables.items())])
    found = tree_store.open_forest(path)
    assert found is not None
    return found


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.dictionaries(st.binary(max_size=6), st.binary(max_size=4), max_size=120))
def test_the_stored_tree_equals_the_built_one(tmp_path: Path, rows: dict[bytes, bytes]) -> None:
    path = tmp_path / "trees.sqlite"
    path.unlink(missing_ok=True)
    stored = _write(path, {"keyTable": rows}).trees["keyTable"]
    built = merkle.build("keyTable", sorted(rows.items()), SMALL)
    assert (stored.root_hash, stored.rows, stored.depth) == (built.root_hash, built.rows,
                                                              built.depth)
    assert _levels(stored) == _levels(built)
    assert stored.whole() == built
    assert merkle.diff(stored, built) == []


def test_pages_and_the_forest_meta(tmp_path: Path) -> None:
    rows = {f"k{i:04d}".encode(): b"v" for i in range(3000)}
    params = TreeParams(b"s", 3, 2)
    forest = _write(tmp_path / "t", {"keyTable": rows, "volumeTable": {}}, params)
    assert (forest.applied_index, forest.term, forest.params) == (9, 2, params)
    built = merkle.build("keyTable", sorted(rows.items()), params)
    assert forest.roots() == {"keyTable": built.root_hash,
                              "volumeTable": merkle.build("volumeTable", [], params).root_hash}
    stored = forest.trees["keyTable"]
    page = stored.nodes(0, b"k1000", b"k2000", limit=5)
    assert [n.start for n in page] == [n.start for n in built.nodes(0, b"k1000", b"k2000", 5)]
    assert all(isinstance(n, Node) for n in page)
    assert stored.nodes(99, b"", None) == [Node(b"", None, built.depth, built.root_hash, 3000)]
    assert tree_store.open_forest(tmp_path / "missing") is None
    (tmp_path / "junk").write_bytes(b"not a database")
    assert tree_store.open_forest(tmp_path / "junk") is None
