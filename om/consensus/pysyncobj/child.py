"""The Raft process of a node: pysyncobj alone on its own GIL.

``python -m om.consensus.pysyncobj.child FD [FD1 ...]`` runs one RaftLog (journal,
transport and overrides as in-process) with no tick thread: this process's
only thread ticks it, and each channel (a socketpair end) is one more descriptor
in pysyncobj's poller, so a submitted entry wakes it as a Raft message does.
Channel 0 (``FD``) is the parent, the node's serving process (shard 0); with S
shards (docs/SHARDS.md, step 2) channel k, 1 <= k < S, is shard k's process. The
parent made every socketpair and passed this process its ends (``pass_fds``); it
keeps the other ends of channels 1..S-1 for the shard processes it starts.
The entries submitted on any channel in one pass are appended after it, the
sub-batches merged into as few entries as the byte cap allows (``entry_merge.py``:
one log position for all of them; each slice carries its shard, and channel k
submits shard k's only). Committed entries are not applied here: ``persist``
forwards each to every channel, each receiving only its shard's slices and a
position for every entry (``shard_forwarding.py``); a result goes to the channels
whose ids it names (for an entry every shard applies, only once every channel
applied it: ``every_shard_acks.py``); role changes go to every channel; snapshots, membership,
transfers and the gauges are the parent's business (channel 0).
Snapshots are written and installed by the parent too (it owns the store).
Writing one never blocks Raft: ``serialize`` only asks the parent to write it
to a file of its own and returns, pysyncobj polls ``serialize_checker`` on
every tick (its ``serializeChecker`` hook), and when the parent answers, the
checker renames the file into place and says SUCCESS, after which pysyncobj
compacts the journal. Installing a received snapshot waits for the parent only
until it has read the dump (a small manifest: Raft's data and the checkpoint it
names); the parent then fetches and installs the store while this process keeps
ticking (answering heartbeats, taking entries, voting on its log), and says
``catching_up`` until it is done: meanwhile this node does not campaign.

Fate sharing: the child exits when any channel closes (the parent or a shard
died: the node fail-stops, and nothing acknowledged is lost, since an
acknowledgement needs a majority's journal), and stops ticking, so that its peers
elect another leader, while any channel has sent nothing for ``PARENT_SILENCE_S``
(a stopped or wedged process must not keep leadership it cannot use); the parent
exits when the child dies. An orderly stop comes from the parent (``close``): the
child tells every shard channel (``closing``) before it exits, so the shards stop
without taking the closed channel for a failure.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pysyncobj import SyncObjConf
from pysyncobj.config import SERIALIZER_STATE
from pysyncobj.poller import POLL_EVENT_TYPE

from om.config import SHARDS_MAX
from om.consensus.pysyncobj import journal, shard_forwarding
from om.consensus.pysyncobj.entry_merge import Append, plan_appends
from om.consensus.pysyncobj.every_shard_acks import EveryShardAcks
from om.consensus.pysyncobj.raft_log import RaftLog, known_leader, own_address, peers
from om.consensus.pysyncobj.replicator import syncobj_conf
from om.consensus.pysyncobj.shard_forwarding import SubmitId
from om.consensus.pysyncobj.transport import GroupCommitTransport
from om.protocol import merged_entry
from om.protocol.channel import FrameReader, Message, encode

logger = logging.getLogger(__name__)
PARENT_SILENCE_S = 1.5
TICK_S = 0.05
JOURNAL_REPORT_S = 1.0     # how often the parent hears of journal sync times and merges
MATCH_REPORT_S = 0.25      # how often the parent hears of the followers' match indexes
OWN_ENTRIES_MAX = 4096     # submitted entries remembered for apply_own (see _forward_apply)


@dataclass(frozen=True)
class Forwarded:
    """An entry handed to the parent to apply (``Applied`` for pysyncobj's callback)."""

    position: int
    applied: bool = True
    response: bytes = b""
    batches_applied: tuple[bool, ...] = ()


class Child:
    """One Raft process: the RaftLog, the channel, and the loop that ticks both."""

    def __init__(self, channels: list[socket.socket]) -> None:
        assert 1 <= len(channels) <= SHARDS_MAX, "one channel per shard"
        self._channels = channels
        self._by_descriptor = {channel.fileno(): k for k, channel in enumerate(channels)}
        self._readers = [FrameReader() for _ in channels]
        self._backlog: deque[tuple[int, Message]] = deque()   # (channel, message)
        self._heard_s = [time.monotonic()] * len(channels)
        self._last_state: tuple[Any, ...] = ()
        self._journal_reported_s = 0.0
        self._journal_syncs_reported = 0
        # the merge-rate gauge: M entries appended and the slices they held
        self._merged_appended = [0, 0]
        self._merged_reported = (0, 0)
        self._merged_reported_s = 0.0
        self._matches_reported_s = 0.0
        self._matches: dict[str, int] = {}
        self._members: list[str] = []
        self._closing = False
        # entries appended here and not committed, by their bytes: the submitters'
        # ids, one per slice
        self._own: dict[bytes, tuple[SubmitId, ...]] = {}
        # what the channels submitted in this pass over them, not yet appended
        self._submitted: list[tuple[SubmitId, bytes]] = []
        # with shards: results of entries every shard applies, held until each did
        self._acks = EveryShardAcks(len(channels)) if len(channels) > 1 else None
        setup = self._receive_blocking()
        assert setup[0] == "setup", f"the first message is the setup, not {setup[0]}"
        _, node, nodes, data_dir, settings, entry_bytes_max = setup
        self._entry_bytes_max: int = entry_bytes_max
        conf: SyncObjConf = syncobj_conf(settings, Path(data_dir), self, entry_bytes_max,
                                         serialize_checker=self.serialize_checker)
        self._dump_file = Path(conf.fullDumpFile)
        self._writing_dump = self._dump_file.with_name(self._dump_file.name + ".writing")
        self._snapshot_state: int = SERIALIZER_STATE.NOT_SERIALIZING
        self._write_superseded = False   # a snapshot was installed while one was written
        conf.autoTick = False
        self._spec = journal.spec_for(settings, Path(conf.journalFile),
                                      Path(conf.fullDumpFile))
        others = peers(node, nodes, settings.links)
        self.raft = RaftLog(own_address(node), others, conf, self._forward_apply,
                            settings.compress_transport, GroupCommitTransport)
        for descriptor in self._by_descriptor:
            self.raft.om_watch(descriptor, self._on_channel)

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> None:
        """Ticks Raft until the parent closes the channel (or any channel closes)."""
        while not self._closing:
            if time.monotonic() - min(self._heard_s) > PARENT_SILENCE_S:
                self._wait_for_channels()
                continue
            self.raft.doTick(TICK_S)
            self._handle_backlog()
            self._report_state()
            self._report_journal()
            self._report_merges()
            self._report_matches()
            if self._acks is not None:
                self._send_results(*self._acks.due(time.monotonic()))
        self.raft.om_destroy()

    def _wait_for_channels(self) -> None:
        logger.warning("a channel is silent: Raft stops until every channel speaks again")
        while not self._closing and time.monotonic() - min(self._heard_s) > PARENT_SILENCE_S:
            readable, _, _ = select.select(self._channels, [], [], TICK_S)
            for channel in readable:
                self._on_channel(channel.fileno(), POLL_EVENT_TYPE.READ)

    def _on_channel(self, descr: int, event: int) -> None:
        """A channel is readable: reads it and every other channel that has bytes (one
        pass over the channels), then handles and appends what they brought, so the
        sub-batches of shards that submitted together share an entry."""
        channel = self._by_descriptor[descr]
        if not self._read(channel, event):
            return
        for other in range(len(self._channels)):
            if other != channel and not self._closing:
                self._read(other, POLL_EVENT_TYPE.READ)
        self._handle_backlog()

    def _read(self, channel: int, event: int) -> bool:
        """Reads what ``channel`` holds into the backlog; whether anything came. A
        closed channel stops this process (fate sharing)."""
        try:
            data = self._channels[channel].recv(1 << 20)
        except BlockingIOError:
            return False
        except ConnectionResetError:   # its process died: as if it had closed the channel
            data = b""
        if not data or event & POLL_EVENT_TYPE.ERROR:
            if channel:
                logger.critical("shard %d's channel closed: the Raft process stops, and "
                                "with it the node (fate sharing)", channel)
            self._closing = True
            return False
        self._heard_s[channel] = time.monotonic()
        self._backlog.extend((channel, m) for m in self._readers[channel].feed(data))
        return True

    def _handle_backlog(self) -> None:
        while self._backlog:
            channel, message = self._backlog.popleft()
            kind = message[0]
            if kind == "submit":
                self._submit(channel, message[1], message[2])
            elif kind == "applied":
                assert self._acks is not None, "an ack asked for by no one"
                self._send_results(self._acks.applied(channel, message[1]))
            elif kind != "keepalive":
                assert channel == 0, f"shard channel {channel} sent {kind}"
                self._handle_parent(message)
        self._append_submitted()

    def _handle_parent(self, message: Message) -> None:
        """A message only the parent (channel 0) sends."""
        kind = message[0]
        if kind == "snapshot_written":
            self._snapshot_written(message[1])
        elif kind == "close":
            for channel in range(1, len(self._channels)):
                self._send(channel, ("closing",))
            self._closing = True
        elif kind == "transfer_leadership":
            self.raft.om_transfer_requested = True
        elif kind == "catching_up":
            self.raft.om_catching_up = message[1]
        elif kind == "compact":
            self.raft.om_compact_now()
        elif kind == "transfer_to":
            self._transfer_to(message[1], message[2])
        else:
            assert kind == "membership", f"unexpected message {kind}"
            self._change_membership(message[1], message[2], message[3])

    def _submit(self, channel: int, request: int, entry: bytes) -> None:
        """Takes an entry for the next append. Channel k submits shard k's slices only:
        each is handed back to the channel of its shard on every node."""
        if len(self._channels) > 1 and merged_entry.is_single_slice(entry):
            shard = merged_entry.slice_records(entry)[0][0]
            assert shard in (channel, merged_entry.EVERY_SHARD), \
                f"channel {channel} submitted another shard's slice"
        self._submitted.append(((channel, request), entry))

    def _append_submitted(self) -> None:
        """Appends what the channels submitted since the last append, merged
        (``entry_merge.py``), in the order it came."""
        if not self._submitted:
            return
        submitted, self._submitted = self._submitted, []
        for append in plan_appends(submitted, self._entry_bytes_max):
            self._append(append)

    def _append(self, append: Append[SubmitId]) -> None:
        """Submits one entry to Raft; its outcome goes back to each submitting channel
        once per request id, as ("result", request ids, reason, position): the same
        position for every slice."""
        entry = append.entry

        def callback(result: Any, reason: int) -> None:
            position = result[0].position if result is not None else 0
            if result is None:
                self._own.pop(entry, None)   # if it commits after all: sent whole
            results = shard_forwarding.results(append.request_ids, reason, position)
            self._send_results(results if self._acks is None
                               else self._acks.result(position, results))

        self._own[entry] = append.request_ids
        while len(self._own) > OWN_ENTRIES_MAX:
            del self._own[next(iter(self._own))]   # the oldest: sent whole if it commits
        if entry[:1] == merged_entry.MERGED:
            self._merged_appended[0] += 1
            self._merged_appended[1] += len(append.request_ids)
        self.raft.submit(entry, callback)

    def _report_state(self) -> None:
        raft = self.raft
        state = (raft.om_is_leader(), int(raft.raftCurrentTerm), known_leader(raft),
                 int(raft.raftCommitIndex), raft.om_candidate())
        if state != self._last_state:
            self._last_state = state
            for channel in range(len(self._channels)):
                self._send(channel, ("state", *state))

    def _transfer_to(self, request_id: int, target: str) -> None:
        """Starts an aimed transfer (``transfer.py``; "" = a random caught-up follower);
        its outcome goes back as ("transfer_result", request_id, code, target, message)."""
        def reply(code: str, chosen: str, text: str) -> None:
            self._send(0, ("transfer_result", request_id, code, chosen, text))

        self.raft.om_transfers.request(target or None, reply)

    def _change_membership(self, request_id: int, op: str, address: str) -> None:
        """Starts a membership change (``membership.py``); its outcome goes back as
        ("membership_result", request_id, code, message)."""
        def reply(code: str, text: str) -> None:
            self._send(0, ("membership_result", request_id, code, text))

        self.raft.om_membership.request(op, address, reply)

    def _report_matches(self) -> None:
        """Sends the followers' match indexes (leader only; {} otherwise) at most once
        per MATCH_REPORT_S, when changed."""
        now = time.monotonic()
        if now - self._matches_reported_s < MATCH_REPORT_S:
            return
        self._matches_reported_s = now
        matches = self.raft.om_transfers.match_indexes()
        if matches != self._matches:
            self._matches = matches
            self._send(0, ("matches", matches))
        members = self.raft.om_membership.members()
        if members != self._members:
            self._members = members
            self._send(0, ("members", members))

    def _report_journal(self) -> None:
        """Sends the journal's sync times at most once per JOURNAL_REPORT_S, when changed."""
        journal_ = self._spec.journal
        now = time.monotonic()
        if journal_ is None or now - self._journal_reported_s < JOURNAL_REPORT_S:
            return
        self._journal_reported_s = now
        if journal_.syncs != self._journal_syncs_reported:
            self._journal_syncs_reported = journal_.syncs
            self._send(0, ("journal", journal_.sync_times.snapshot()))

    # -- what Raft hands to the parent -----------------------------------------------------

    def _report_merges(self) -> None:
        """Sends the merge-rate gauge (M entries appended, the slices they held) at most
        once per JOURNAL_REPORT_S, when changed."""
        now = time.monotonic()
        counts = (self._merged_appended[0], self._merged_appended[1])
        if now - self._merged_reported_s < JOURNAL_REPORT_S or counts == self._merged_reported:
            return
        self._merged_reported_s, self._merged_reported = now, counts
        self._send(0, ("merges", *counts))

    def _forward_apply(self, position: int, entry: bytes) -> Forwarded:
        """Hands a committed entry to every channel (``shard_forwarding.py``): to the
        channels that submitted its slices here, the ids they gave them (each keeps
        their bytes until the result and merges them as this process did); to the
        others their slices' bytes, or the position alone."""
        own = self._own.pop(entry, None)
        messages = shard_forwarding.forwards(position, entry, own, len(self._channels))
        for channel, message in enumerate(messages):
            self._send(channel, message)
        if own is not None and self._acks is not None and merged_entry.is_every_shards(entry):
            self._send_results(*self._acks.expect(position, time.monotonic()))
            for channel in range(len(self._channels)):
                self._send(channel, ("ack", position))
        return Forwarded(position)

    def _send_results(self, *results: dict[int, Message] | None) -> None:
        """Sends result messages (None: held, nothing to send)."""
        for messages in results:
            for channel, message in (messages or {}).items():
                self._send(channel, message)

    def serialize(self, tmp_file: str, raft_data: object) -> None:
        """pysyncobj's serializer hook: asks the parent to write the snapshot, and returns.

        pysyncobj renames ``tmp_file`` into place as soon as this returns; the
        parent writes to a file of this process's choosing instead, and
        ``tmp_file`` is removed first, so that rename fails harmlessly (pysyncobj
        then waits for ``serialize_checker``)."""
        assert self._snapshot_state == SERIALIZER_STATE.NOT_SERIALIZING
        Path(tmp_file).unlink(missing_ok=True)
        self._writing_dump.unlink(missing_ok=True)
        self._snapshot_state = SERIALIZER_STATE.SERIALIZING
        self._send(0, ("snapshot_write", str(self._writing_dump), raft_data))

    def serialize_checker(self) -> int:
        """pysyncobj's ``serializeChecker``: SERIALIZING until the parent answered, then
        SUCCESS or FAILED once, then NOT_SERIALIZING."""
        state = self._snapshot_state
        if state == SERIALIZER_STATE.SUCCESS:
            self.raft.om_restart_transmissions()
        if state in (SERIALIZER_STATE.SUCCESS, SERIALIZER_STATE.FAILED):
            self._snapshot_state = SERIALIZER_STATE.NOT_SERIALIZING
        return state

    def _snapshot_written(self, error: str) -> None:
        """The parent's answer: the snapshot is in ``_writing_dump`` (synced when durable);
        renaming it into place completes it. The rename is made durable by the
        journal's compaction that follows (its sync thread syncs the snapshot and its
        directory before it drops any entry), not here: this thread does not wait for
        the disk. Until then a power loss may undo the rename, and the older snapshot
        and the whole journal are found again."""
        assert self._snapshot_state == SERIALIZER_STATE.SERIALIZING
        if self._write_superseded:
            self._write_superseded = False
            self._writing_dump.unlink(missing_ok=True)
            self._snapshot_state = SERIALIZER_STATE.FAILED
            return
        if error:
            logger.warning("the parent could not write the snapshot: %s", error)
            self._snapshot_state = SERIALIZER_STATE.FAILED
            return
        os.replace(self._writing_dump, self._dump_file)
        self._snapshot_state = SERIALIZER_STATE.SUCCESS

    def deserialize(self, file_name: str) -> object:
        """pysyncobj's deserializer hook: the parent reads the dump and answers with
        Raft's data, then installs the snapshot's store without this process waiting.

        A snapshot this node was still writing is older than the one installed
        now: its answer must neither replace the installed file nor compact the
        log pysyncobj has just rebuilt, so it is discarded (FAILED)."""
        if self._snapshot_state == SERIALIZER_STATE.SERIALIZING:
            self._write_superseded = True
        self._send(0, ("snapshot_install", file_name))
        _, raft_data, error = self._await_reply("snapshot_installed")
        if error:
            raise RuntimeError(f"the parent could not install the snapshot: {error}")
        return raft_data

    def _await_reply(self, kind: str) -> Message:
        """Reads the parent's channel until ``kind`` arrives; keeps other messages (and
        the other channels' bytes, in their sockets) for later."""
        while True:
            for position, (channel, message) in enumerate(self._backlog):
                if channel == 0 and message[0] == kind:
                    del self._backlog[position]
                    return message
            data = self._receive_some()
            self._backlog.extend((0, m) for m in self._readers[0].feed(data))

    # -- the channel -----------------------------------------------------------------------

    def _send(self, channel: int, message: Message) -> None:
        """Writes one message to ``channel`` whole (a channel that stays full stops this
        process's ticks: its peers elect another leader)."""
        socket_ = self._channels[channel]
        view = memoryview(encode(message))
        while view:
            try:
                sent = socket_.send(view)
            except BlockingIOError:
                select.select([], [socket_], [], TICK_S)
                continue
            except (BrokenPipeError, ConnectionResetError):   # gone: seen as closed next
                self._closing = True
                return
            view = view[sent:]

    def _receive_some(self) -> bytes:
        """Bytes from the parent's channel (0), waiting for them."""
        parent = self._channels[0]
        while True:
            readable, _, _ = select.select([parent], [], [], TICK_S)
            if not readable:
                continue
            try:
                data = parent.recv(1 << 20)
            except BlockingIOError:
                continue
            if not data:
                raise SystemExit("the parent closed the channel")
            self._heard_s[0] = time.monotonic()
            return data

    def _receive_blocking(self) -> Message:
        """The parent's next message; what came with it waits in the backlog."""
        while True:
            messages = self._readers[0].feed(self._receive_some())
            if messages:
                self._backlog.extend((0, m) for m in messages[1:])
                return messages[0]


def main(argv: list[str]) -> int:
    """Runs the Raft process on the channel descriptors ``argv`` (channel 0 first)."""
    logging.basicConfig(level=os.environ.get("OM_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(levelname)s %(name)s[raft]: %(message)s")
    for ignored in (signal.SIGINT, signal.SIGTERM):  # the parent stops it, through the channel
        signal.signal(ignored, signal.SIG_IGN)
    channels = [socket.socket(fileno=int(descriptor)) for descriptor in argv]
    for channel in channels:
        channel.setblocking(False)
    Child(channels).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
