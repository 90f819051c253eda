"""The Raft process of a node: pysyncobj alone on its own GIL.

``python -m om.consensus.pysyncobj.child FD`` runs one RaftLog (journal,
transport and overrides as in-process) with no tick thread: this process's
only thread ticks it, and the channel to the parent (``FD``, a socketpair end)
is one more descriptor in pysyncobj's poller, so a submitted entry wakes it as
a Raft message does. The entries submitted in one pass over the channel are
appended after it, the leader flow's sub-batches merged into as few entries as
the byte cap allows (``entry_merge.py``: one log position for all of them).
Committed entries are not applied here: ``persist`` forwards each to the parent,
which applies it to its store in log order.
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

Fate sharing: the child exits when the channel closes (the parent died), and
stops ticking, so that its peers elect another leader, while the parent has
sent nothing for ``PARENT_SILENCE_S`` (a stopped or wedged parent must not
keep leadership it cannot use); the parent exits when the child dies.
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

from om.consensus.pysyncobj import journal
from om.consensus.pysyncobj.entry_merge import Append, plan_appends
from om.consensus.pysyncobj.raft_log import RaftLog, known_leader, own_address, peers
from om.consensus.pysyncobj.replicator import syncobj_conf
from om.consensus.pysyncobj.transport import GroupCommitTransport
from om.protocol.channel import FrameReader, Message, encode

logger = logging.getLogger(__name__)
PARENT_SILENCE_S = 1.5
TICK_S = 0.05
JOURNAL_REPORT_S = 1.0     # how often the parent hears of journal sync times
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

    def __init__(self, channel: socket.socket) -> None:
        self._channel = channel
        self._reader = FrameReader()
        self._backlog: deque[Message] = deque()
        self._heard_s = time.monotonic()
        self._last_state: tuple[Any, ...] = ()
        self._journal_reported_s = 0.0
        self._journal_syncs_reported = 0
        self._matches_reported_s = 0.0
        self._matches: dict[str, int] = {}
        self._members: list[str] = []
        self._closing = False
        # entries appended for the parent and not committed, by their bytes: the
        # parent's request ids, one per slice
        self._own: dict[bytes, tuple[int, ...]] = {}
        # what the parent submitted in this pass over the channel, not yet appended
        self._submitted: list[tuple[int, bytes]] = []
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
        self.raft.om_watch(channel.fileno(), self._on_channel)

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> None:
        """Ticks Raft until the parent closes the channel."""
        while not self._closing:
            if time.monotonic() - self._heard_s > PARENT_SILENCE_S:
                self._wait_for_parent()
                continue
            self.raft.doTick(TICK_S)
            self._handle_backlog()
            self._report_state()
            self._report_journal()
            self._report_matches()
        self.raft.om_destroy()

    def _wait_for_parent(self) -> None:
        logger.warning("the parent process is silent: Raft stops until it speaks again")
        while not self._closing and time.monotonic() - self._heard_s > PARENT_SILENCE_S:
            readable, _, _ = select.select([self._channel], [], [], TICK_S)
            if readable:
                self._on_channel(self._channel.fileno(), POLL_EVENT_TYPE.READ)

    def _on_channel(self, descr: int, event: int) -> None:
        try:
            data = self._channel.recv(1 << 20)
        except BlockingIOError:
            return
        except ConnectionResetError:   # the parent died: as if it had closed the channel
            data = b""
        if not data or event & POLL_EVENT_TYPE.ERROR:
            self._closing = True
            return
        self._heard_s = time.monotonic()
        self._backlog.extend(self._reader.feed(data))
        self._handle_backlog()

    def _handle_backlog(self) -> None:
        while self._backlog:
            message = self._backlog.popleft()
            kind = message[0]
            if kind == "submit":
                self._submitted.append((message[1], message[2]))
            elif kind == "snapshot_written":
                self._snapshot_written(message[1])
            elif kind == "close":
                self._closing = True
            elif kind == "transfer_leadership":
                self.raft.om_transfer_requested = True
            elif kind == "catching_up":
                self.raft.om_catching_up = message[1]
            elif kind == "compact":
                self.raft.om_compact_now()
            elif kind == "transfer_to":
                self._transfer_to(message[1], message[2])
            elif kind == "membership":
                self._change_membership(message[1], message[2], message[3])
            else:
                assert kind == "keepalive", f"unexpected message {kind}"
        self._append_submitted()

    def _append_submitted(self) -> None:
        """Appends what the parent submitted since the last append, merged
        (``entry_merge.py``), in the order it came."""
        if not self._submitted:
            return
        submitted, self._submitted = self._submitted, []
        for append in plan_appends(submitted, self._entry_bytes_max):
            self._append(append)

    def _append(self, append: Append) -> None:
        """Submits one entry to Raft; its outcome goes back once per request id, as
        ("result", request ids, reason, position): the same position for every slice."""
        entry = append.entry

        def callback(result: Any, reason: int) -> None:
            position = result[0].position if result is not None else 0
            if result is None:
                self._own.pop(entry, None)   # if it commits after all: sent whole
            self._send(("result", append.request_ids, reason, position))

        self._own[entry] = append.request_ids
        while len(self._own) > OWN_ENTRIES_MAX:
            del self._own[next(iter(self._own))]   # the oldest: sent whole if it commits
        self.raft.submit(entry, callback)

    def _report_state(self) -> None:
        raft = self.raft
        state = (raft.om_is_leader(), int(raft.raftCurrentTerm), known_leader(raft),
                 int(raft.raftCommitIndex), raft.om_candidate())
        if state != self._last_state:
            self._last_state = state
            self._send(("state", *state))

    def _transfer_to(self, request_id: int, target: str) -> None:
        """Starts an aimed transfer (``transfer.py``; "" = a random caught-up follower);
        its outcome goes back as ("transfer_result", request_id, code, target, message)."""
        def reply(code: str, chosen: str, text: str) -> None:
            self._send(("transfer_result", request_id, code, chosen, text))

        self.raft.om_transfers.request(target or None, reply)

    def _change_membership(self, request_id: int, op: str, address: str) -> None:
        """Starts a membership change (``membership.py``); its outcome goes back as
        ("membership_result", request_id, code, message)."""
        def reply(code: str, text: str) -> None:
            self._send(("membership_result", request_id, code, text))

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
            self._send(("matches", matches))
        members = self.raft.om_membership.members()
        if members != self._members:
            self._members = members
            self._send(("members", members))

    def _report_journal(self) -> None:
        """Sends the journal's sync times at most once per JOURNAL_REPORT_S, when changed."""
        journal_ = self._spec.journal
        now = time.monotonic()
        if journal_ is None or now - self._journal_reported_s < JOURNAL_REPORT_S:
            return
        self._journal_reported_s = now
        if journal_.syncs != self._journal_syncs_reported:
            self._journal_syncs_reported = journal_.syncs
            self._send(("journal", journal_.sync_times.snapshot()))

    # -- what Raft hands to the parent -----------------------------------------------------

    def _forward_apply(self, position: int, entry: bytes) -> Forwarded:
        """Hands a committed entry to the parent: an entry appended for the parent by the
        ids it gave its slices (the parent keeps their bytes until the result and
        merges them as this process did), any other whole."""
        own = self._own.pop(entry, None)
        if own is None:
            self._send(("apply", position, entry))
        else:
            self._send(("apply_own", position, own))
        return Forwarded(position)

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
        self._send(("snapshot_write", str(self._writing_dump), raft_data))

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
        self._send(("snapshot_install", file_name))
        _, raft_data, error = self._await_reply("snapshot_installed")
        if error:
            raise RuntimeError(f"the parent could not install the snapshot: {error}")
        return raft_data

    def _await_reply(self, kind: str) -> Message:
        """Reads the channel until ``kind`` arrives; keeps other messages for later."""
        while True:
            for position, message in enumerate(self._backlog):
                if message[0] == kind:
                    del self._backlog[position]
                    return message
            data = self._receive_some()
            self._backlog.extend(self._reader.feed(data))

    # -- the channel -----------------------------------------------------------------------

    def _send(self, message: Message) -> None:
        view = memoryview(encode(message))
        while view:
            try:
                sent = self._channel.send(view)
            except BlockingIOError:
                select.select([], [self._channel], [], TICK_S)
                continue
            view = view[sent:]

    def _receive_some(self) -> bytes:
        while True:
            readable, _, _ = select.select([self._channel], [], [], TICK_S)
            if not readable:
                continue
            try:
                data = self._channel.recv(1 << 20)
            except BlockingIOError:
                continue
            if not data:
                raise SystemExit("the parent closed the channel")
            self._heard_s = time.monotonic()
            return data

    def _receive_blocking(self) -> Message:
        while True:
            messages = self._reader.feed(self._receive_some())
            if messages:
                self._backlog.extend(messages[1:])
                return messages[0]


def main(argv: list[str]) -> int:
    """Runs the Raft process on the channel descriptor ``argv[0]``."""
    logging.basicConfig(level=os.environ.get("OM_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(levelname)s %(name)s[raft]: %(message)s")
    for ignored in (signal.SIGINT, signal.SIGTERM):  # the parent stops it, through the channel
        signal.signal(ignored, signal.SIG_IGN)
    channel = socket.socket(fileno=int(argv[0]))
    channel.setblocking(False)
    Child(channel).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
