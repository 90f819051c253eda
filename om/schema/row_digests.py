"""Row digests and digest leaves: the pure arithmetic replicas compare.

Every table is cut into ``2**leaf_bits`` *leaves* by a keyed hash of each row's
key; a leaf holds an order-independent digest of its rows: the sum, modulo
2**256, of each row's digest, and the count of its rows (the multiset hash
construction, Clarke et al.: a put adds the new row's digest, a delete subtracts
the old one's, an overwrite does both, each in O(1) whatever the order; XOR would
not do, since two equal rows would cancel). Above the leaves, a node of level j
sums the ``2**fanout_bits`` nodes of level j - 1 below it; the root sums the table.

Both hashes are keyed with the cluster's digest key (BLAKE2b in its keyed mode,
with a person string per use, so neither hash can stand for the other):

* a row's leaf comes from its key alone, so an overwrite stays in its leaf and two
  replicas put the same key in the same leaf whatever its value; a client that does
  not know the key cannot grind key names that fall into one leaf;
* a row's digest covers its key and value (length-prefixed): a value moved to
  another key, or two values swapped, changes the sum.

Pure: no IO. ``om.statemachine.digests`` keeps the leaves current as rows change;
``om.integrity.digest_tree`` reads and compares the levels above them.
"""

from __future__ import annotations

import hashlib
import struct

SUM_BYTES = 32
SUM_MODULUS = 1 << (8 * SUM_BYTES)
LEAF_VALUE = struct.Struct(">32sQ")      # a leaf row: sum, then count
KEY_BYTES = 32
_LENGTH = struct.Struct(">I")
_LEAF_PERSON = b"om-digest-leaf"
_ROW_PERSON = b"om-digest-row"
_KEY_ID_LABEL = b"om digest key id v1"


class RowHasher:
    """The two keyed hashes of one digest key and tree shape."""

    __slots__ = ("_leaf", "_row", "_shift", "key", "leaf_bits")

    def __init__(self, key: bytes, leaf_bits: int) -> None:
        assert len(key) == KEY_BYTES, "a digest key is 32 bytes"
        assert 1 <= leaf_bits <= 24
        self.key = key
        self.leaf_bits = leaf_bits
        self._shift = 64 - leaf_bits
        # keyed once: each hash copies the state past the key's block
        self._leaf = hashlib.blake2b(digest_size=8, key=key, person=_LEAF_PERSON)
        self._row = hashlib.blake2b(digest_size=SUM_BYTES, key=key, person=_ROW_PERSON)

    def leaf(self, key: bytes) -> int:
        """The leaf of the row stored under ``key`` (any table)."""
        hasher = self._leaf.copy()
        hasher.update(key)
        return int.from_bytes(hasher.digest(), "big") >> self._shift

    def change(self, key: bytes, old: bytes | None, new: bytes | None) -> tuple[int, int]:
        """(leaf, sum delta) of ``key``'s row going from ``old`` to ``new`` (None: absent):
        ``leaf(key)`` and ``digest(key, new) - digest(key, old)``, in one call (apply's
        hot path; the same hashes, inlined)."""
        hasher = self._leaf.copy()
        hasher.update(key)
        leaf = int.from_bytes(hasher.digest(), "big") >> self._shift
        head = _LENGTH.pack(len(key)) + key
        delta = 0
        if old is not None:
            hasher = self._row.copy()
            hasher.update(head)
            hasher.update(old)
            delta = -int.from_bytes(hasher.digest(), "big")
        if new is not None:
            hasher = self._row.copy()
            hasher.update(head)
            hasher.update(new)
            delta += int.from_bytes(hasher.digest(), "big")
        return leaf, delta

    def digest(self, key: bytes, value: bytes) -> int:
        """The row's digest, as an integer below ``SUM_MODULUS``."""
        hasher = self._row.copy()
        hasher.update(_LENGTH.pack(len(key)))
        hasher.update(key)
        hasher.update(value)
        return int.from_bytes(hasher.digest(), "big")


def key_id(key: bytes) -> bytes:
    """Eight bytes that name a digest key without revealing it: replicas whose digests
    are comparable show the same id."""
    return hashlib.sha256(_KEY_ID_LABEL + key).digest()[:8]


def encode_leaf(total: int, rows: int) -> bytes:
    """A leaf's (or any node's) stored form."""
    assert 0 <= total < SUM_MODULUS
    assert rows > 0, "an empty leaf is not stored"
    return LEAF_VALUE.pack(total.to_bytes(SUM_BYTES, "big"), rows)


def decode_leaf(raw: bytes) -> tuple[int, int]:
    """(sum, rows) of a stored leaf."""
    assert len(raw) == LEAF_VALUE.size
    total, rows = LEAF_VALUE.unpack(raw)
    return int.from_bytes(total, "big"), rows


def node_bytes(total: int, rows: int) -> bytes:
    """A node's digest as replicas compare it: its sum, then its row count (empty: zeros)."""
    assert 0 <= total < SUM_MODULUS
    assert rows >= 0
    return LEAF_VALUE.pack(total.to_bytes(SUM_BYTES, "big"), rows)


def depth(leaf_bits: int, fanout_bits: int) -> int:
    """The root's level: the levels above the leaves, each grouping ``2**fanout_bits``."""
    assert leaf_bits >= 1
    assert fanout_bits >= 1
    return -(-leaf_bits // fanout_bits)
