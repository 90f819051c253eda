"""A verification's Merkle trees on disk, built while streaming, served a page at a time.

The compute process (``om.integrity.compute``) scans each table of a verify
checkpoint once and feeds its rows to a ``TreeWriter``, which cuts leaves and
every level above them as the rows go by (``merkle``'s layout: a key of
boundary height h closes the open nodes of levels below h) and writes each
node to an SQLite file the moment it is closed. It holds one open node per
level, never a table's leaves. The node that serves the verification keeps
only the roots in memory (``StoredForest``) and answers each page of a level
(``GetVerifyTreesRequest.level``) with one indexed query, so its memory does
not grow with the table either.

Equal to ``merkle.build``: the same leaves, levels, hashes and root
(tests/integrity/test_tree_store.py checks it against the in-memory build).

The file is written under a temporary name, synced and renamed into place, so
a file under the final name is whole; ``open_forest`` returns None for a
missing or unreadable one (the verifier computes it again).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from om.disk.durable_files import fsync_path
from om.integrity import merkle, scan
from om.integrity.merkle import MerkleTree, Node, TreeParams
from om.integrity.scan import RateLimit
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView

_SCHEMA = """
CREATE TABLE nodes (tbl TEXT NOT NULL, level INTEGER NOT NULL, start BLOB NOT NULL,
                    hash BLOB NOT NULL, rows INTEGER NOT NULL,
                    PRIMARY KEY (tbl, level, start)) WITHOUT ROWID;
CREATE TABLE roots (tbl TEXT PRIMARY KEY, root BLOB NOT NULL, rows INTEGER NOT NULL,
                    depth INTEGER NOT NULL);
CREATE TABLE meta (applied_index INTEGER NOT NULL, term INTEGER NOT NULL, salt BLOB NOT NULL,
                   leaf_bits INTEGER NOT NULL, fanout_bits INTEGER NOT NULL);
"""
_INSERT_EVERY = 5000          # nodes buffered before one executemany
_LENGTH = struct.Struct(">I")  # merkle.row_bytes's length prefixes


@dataclass
class _Open:
    """The open (not yet closed) node of one level."""

    start: bytes = b""
    hasher: object | None = None
    rows: int = 0
    children: int = 0


class TreeWriter:
    """Builds one table's tree from its rows in key order, writing each node once closed."""

    def __init__(self, db: sqlite3.Connection, table: str, params: TreeParams) -> None:
        self._db, self._table, self._params = db, table, params
        self._levels: list[_Open] = []            # index d: the open node of level d + 1
        self._counts: list[int] = []              # nodes closed per level (0: leaves)
        self._pending: list[tuple[str, int, bytes, bytes, int]] = []
        # a key whose boundary hash has any of these low bits set starts no leaf
        self._leaf_mask = (1 << params.leaf_bits) - 1
        self._leaf = hashlib.sha256(b"L")
        self._leaf_start = b""
        self._leaf_rows = 0
        self._previous: bytes | None = None

    def add_page(self, rows: Sequence[tuple[bytes, bytes]]) -> None:
        """The next rows (keys strictly increasing, after every row added before).

        The hot loop of a verification (every row of every table): locals only, the
        boundary's full height computed only for the ~1 key in 2**leaf_bits whose low
        bits say it may start a leaf, one hash update per row."""
        salt, mask, sha256, pack = self._params.salt, self._leaf_mask, hashlib.sha256, _LENGTH.pack
        leaf, start, count, previous = self._leaf, self._leaf_start, self._leaf_rows, self._previous
        for key, value in rows:
            assert previous is None or key > previous, "rows must come in key order"
            previous = key
            if (key != start
                    and not int.from_bytes(sha256(salt + key).digest()[5:8], "big") & mask):
                height = merkle.boundary_height(key, self._params)
                if height >= 1:
                    self._emit(0, start, leaf.digest(), count, height)
                    leaf, start, count = sha256(b"L"), key, 0
            leaf.update(pack(len(key)) + key + pack(len(value)) + value)
            count += 1
        self._leaf, self._leaf_start, self._leaf_rows, self._previous = leaf, start, count, previous

    def finish(self) -> tuple[bytes, int, int]:
        """Closes every level; writes the root; returns (root hash, rows, depth)."""
        self._emit(0, self._leaf_start, self._leaf.digest(), self._leaf_rows, 0)
        level = 0
        while self._counts[level] > 1:
            level += 1
            top = self._levels[level - 1]
            digest = top.hasher.digest()  # type: ignore[attr-defined]
            self._close(level, top.start, digest, top.rows, 0)
        self._flush()
        root = self._db.execute("SELECT hash, rows FROM nodes WHERE tbl = ? AND level = ? "
                                "ORDER BY start LIMIT 1", (self._table, level)).fetchone()
        self._db.execute("INSERT INTO roots VALUES (?, ?, ?, ?)",
                         (self._table, root[0], root[1], level))
        return bytes(root[0]), int(root[1]), level

    def _emit(self, level: int, start: bytes, digest: bytes, rows: int, height: int) -> None:
        """Closes a node of ``level``; the next node starts at a key of ``height``
        (0 at the end), which closes the open nodes of levels 1 to height - 1."""
        self._close(level, start, digest, rows, height)

    def _close(self, level: int, start: bytes, digest: bytes, rows: int, height: int) -> None:
        self._pending.append((self._table, level, start, digest, rows))
        if len(self._pending) >= _INSERT_EVERY:
            self._flush()
        while len(self._counts) <= level:
            self._counts.append(0)
        self._counts[level] += 1
        while len(self._levels) <= level:
            self._levels.append(_Open())
        parent = self._levels[level]                       # the open node of level + 1
        if parent.hasher is None:
            parent.start, parent.hasher, parent.rows = start, hashlib.sha256(b"N"), 0
        parent.hasher.update(digest)  # type: ignore[attr-defined]
        parent.rows += rows
        parent.children += 1
        if height > level + 1:                              # the next node starts a new one
            parent_digest = parent.hasher.digest()  # type: ignore[attr-defined]
            self._levels[level] = _Open()
            self._close(level + 1, parent.start, parent_digest, parent.rows, height)

    def _flush(self) -> None:
        if self._pending:
            self._db.executemany("INSERT INTO nodes VALUES (?, ?, ?, ?, ?)", self._pending)
            self._pending = []


def write_forest(path: Path, applied_index: int, term: int, params: TreeParams,
                 tables: Iterable[tuple[str, Iterable[Sequence[tuple[bytes, bytes]]]]]) -> None:
    """Writes every table's tree to ``path`` (atomically: tmp, fsync, rename), from
    each table's pages of rows in key order."""
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    db = sqlite3.connect(tmp)
    try:
        db.execute("PRAGMA journal_mode = OFF")
        db.execute("PRAGMA synchronous = OFF")       # one fsync of the whole file below
        db.executescript(_SCHEMA)
        db.execute("INSERT INTO meta VALUES (?, ?, ?, ?, ?)",
                   (applied_index, term, params.salt, params.leaf_bits, params.fanout_bits))
        for table, pages in tables:
            writer = TreeWriter(db, table, params)
            for page in pages:
                writer.add_page(page)
            writer.finish()
        db.commit()
    finally:
        db.close()
    with tmp.open("rb+") as out:
        os.fsync(out.fileno())
    os.replace(tmp, path)
    fsync_path(path.parent)


def compute_to_file(view: ReadView, params: TreeParams, path: Path,
                    limit: RateLimit | None = None) -> StoredForest:
    """Every table's tree of ``view`` (a checkpoint, or a stopped node's store), streamed
    to ``path``; the forest read back (roots in memory, nodes in the file)."""
    raw = view.get(om_pb2.TRANSACTION_INFO, tables.TRANSACTION_INFO_KEY)
    info = om_pb2.TransactionInfo() if raw is None else om_pb2.TransactionInfo.FromString(raw)
    write_forest(path, info.applied_index, info.term, params,
                 ((name, scan.table_pages(view, table, limit))
                  for table, name in tables.TABLE_NAMES.items()))
    found = open_forest(path)
    assert found is not None, f"the trees just written to {path} do not read back"
    return found


@dataclass(frozen=True)
class StoredTree:
    """One table's tree in the file (``merkle.TreeView``): each read is one query."""

    path: Path
    table: str
    params: TreeParams
    root_hash: bytes
    rows: int
    depth: int

    def nodes(self, level: int, start: bytes, end: bytes | None,
              limit: int | None = None) -> list[Node]:
        """The nodes of ``level`` (``min(level, depth)``) starting in [start, end), in key
        order, the first ``limit`` of them; the last one's end is None."""
        level = min(level, self.depth)
        query = "SELECT start, hash, rows FROM nodes WHERE tbl = ? AND level = ? AND start >= ?"
        args: list[object] = [self.table, level, start]
        if end is not None:
            query += " AND start < ?"
            args.append(end)
        query += " ORDER BY start"
        if limit is not None:
            query += " LIMIT ?"
            args.append(limit)
        with _reader(self.path) as db:
            found = db.execute(query, args).fetchall()
        nodes = [Node(bytes(s), None, level, bytes(h), int(r)) for s, h, r in found]
        return [Node(n.start, after.start if after is not None else None, n.level, n.hash,
                     n.rows) for n, after in zip(nodes, [*nodes[1:], None], strict=True)]

    def whole(self) -> MerkleTree:
        """The whole tree in memory (the one-frame answer older tools ask for)."""
        leaves = [(n.start, n.hash, n.rows) for n in self.nodes(0, b"", None)]
        return merkle.assemble(self.table, self.params, leaves)


@dataclass(frozen=True)
class StoredForest:
    """A verification's trees: the roots in memory, the nodes in the file."""

    path: Path
    applied_index: int
    term: int
    params: TreeParams
    trees: dict[str, StoredTree]

    def roots(self) -> dict[str, bytes]:
        """The root hash of each table."""
        return {name: tree.root_hash for name, tree in self.trees.items()}


def open_forest(path: Path) -> StoredForest | None:
    """The trees in ``path``; None when there is no such file or it cannot be read."""
    if not path.is_file():
        return None
    try:
        with _reader(path) as db:
            meta = db.execute("SELECT applied_index, term, salt, leaf_bits, fanout_bits "
                              "FROM meta").fetchone()
            roots = db.execute("SELECT tbl, root, rows, depth FROM roots").fetchall()
    except sqlite3.Error:
        return None
    if meta is None:
        return None
    params = TreeParams(bytes(meta[2]), int(meta[3]), int(meta[4]))
    trees = {str(t): StoredTree(path, str(t), params, bytes(r), int(n), int(d))
             for t, r, n, d in roots}
    return StoredForest(path, int(meta[0]), int(meta[1]), params, trees)


@contextlib.contextmanager
def _reader(path: Path):  # type: ignore[no-untyped-def]
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        yield db
    finally:
        db.close()
