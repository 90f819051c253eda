"""AES-GCM frames in place of pysyncobj's Fernet (``frame_cipher.py``): what seals opens
only with the same secret, anything altered is refused as Fernet refuses it, nonces
never repeat, and the sender cache is bounded."""

from __future__ import annotations

import pytest
from cryptography.fernet import InvalidToken
from pysyncobj import SyncObjConf

from om.cluster import lifecycle as om_cluster
from om.consensus.pysyncobj import frame_cipher
from om.consensus.pysyncobj.frame_cipher import AeadFrames
from om.consensus.pysyncobj.raft_log import RaftLog
from om.consensus.pysyncobj.transport import GroupCommitTransport
from tests.consensus.raft_nodes import Applied

SECRET = "correct horse battery staple"


@pytest.fixture(scope="module")
def key() -> bytes:
    return AeadFrames.from_secret(SECRET)._key


def test_a_frame_opens_on_another_node_with_the_secret(key: bytes) -> None:
    sender, receiver = AeadFrames(key), AeadFrames(key)
    sealed = sender.encrypt_at_time(b"append_entries", 1234)
    assert receiver.extract_timestamp(sealed) == 1234
    assert receiver.decrypt(sealed) == b"append_entries"
    assert b"append_entries" not in sealed


@pytest.mark.parametrize("where", [0, 5, 20, 30, -1])
def test_an_altered_byte_is_refused(key: bytes, where: int) -> None:
    sealed = bytearray(AeadFrames(key).encrypt_at_time(b"x" * 40, 7))
    sealed[where] ^= 0x01
    with pytest.raises(InvalidToken):
        AeadFrames(key).decrypt(bytes(sealed))


def test_another_secret_truncation_and_garbage_are_refused(key: bytes) -> None:
    sealed = AeadFrames(key).encrypt_at_time(b"vote", 1)
    with pytest.raises(InvalidToken):
        AeadFrames.from_secret("another secret").decrypt(sealed)
    for bad in (sealed[:20], b"", b"\x01" * 10):
        with pytest.raises(InvalidToken):
            AeadFrames(key).extract_timestamp(bad)
        with pytest.raises(InvalidToken):
            AeadFrames(key).decrypt(bad)


def test_nonces_never_repeat_under_one_key(key: bytes) -> None:
    """A counter per sender subkey; two senders (two processes) seal under two subkeys."""
    one, two = AeadFrames(key), AeadFrames(key)
    headers = {one.encrypt_at_time(b"", 1)[:25] for _ in range(100)}
    assert len(headers) == 100
    assert one._sender != two._sender


def test_the_sender_cache_is_bounded(key: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frame_cipher, "SENDERS_MAX", 4)
    receiver = AeadFrames(key)
    for _ in range(10):
        receiver.decrypt(AeadFrames(key).encrypt_at_time(b"hi", 1))
    assert len(receiver._openers) == 4


def test_a_raft_node_with_a_secret_seals_with_aes_gcm() -> None:
    base = om_cluster.free_port_base(1)
    conf = SyncObjConf(autoTick=False, password=SECRET)
    peers = [f"127.0.0.1:{base + 10}", f"127.0.0.1:{base + 12}"]   # one dialled, one not
    node = RaftLog(f"127.0.0.1:{base + 11}", peers, conf,
                   lambda position, _entry: Applied(position), False,
                   GroupCommitTransport)
    try:
        assert isinstance(node.encryptor, AeadFrames)
        connections = node._SyncObj__transport._connections.values()
        assert connections
        assert all(c.encryptor is node.encryptor for c in connections), \
            "the connections built inside SyncObj.__init__ seal with it too"
        sealed = node.encryptor.encrypt_at_time(b"frame", 3)
        assert AeadFrames.from_secret(SECRET).decrypt(sealed) == b"frame"
    finally:
        node._destroy()
