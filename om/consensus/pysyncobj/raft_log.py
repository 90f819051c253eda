"""The SyncObj: pysyncobj's Raft node with one replicated method, and two repairs.

``RaftLog.persist(entry)`` applies one committed entry at its log position
(inside apply, pysyncobj's ``raftLastApplied + 1`` is the entry's index).

Subclass overrides, each tested in ``tests/consensus/``:

* **Pipelining (``nextIndex``).** On every successful append response
  pysyncobj sets the follower's ``nextIndex`` to "acknowledged + 1", even when
  later entries are already on their way, so every entry still in flight is
  sent again and the follower truncates and re-journals it (pysyncobj logs
  CRITICAL "truncating already-applied log entries"). Here a plain success
  never moves ``nextIndex`` backwards; a reset (the follower's log differs)
  still does, so a follower that lost entries is still repaired, unless the
  reset is stale (as etcd's raft decides): one at or below what the follower
  has acknowledged, or one answering an append sent before the last reset was
  acted on in this leader's term, neither its probe nor the latest append sent
  (each answer says which append it answers). Acting on a stale
  reset sends everything again, and pysyncobj's follower drops and re-appends
  whatever an append overlaps (its CRITICAL "truncating already-applied log
  entries").
* **The leader counts itself only for what its disk holds.** pysyncobj's
  commit step counts the leader toward every quorum for every entry of its
  log; the journal (``journal.py``) now syncs on a thread of its own, so the
  leader's last entries may not be on its disk yet. ``_commit_synced`` runs
  Raft's rule first, with the leader counted only up to its journal's
  ``synced_index``: the highest index held by a majority, committed if it is
  of the current term. A leader whose disk is slow thus commits with a
  majority of followers (entries reach its own disk later, as on a follower
  that lags); one whose followers are slow commits once its own sync and
  enough of theirs are done. pysyncobj's own step is then kept from counting the leader on
  unsynced entries: while it runs (``_committing``: from the start of a
  leader's tick to ``__applyLogEntries``, which pysyncobj calls right after
  it), ``__getCurrentLogIndex``, the bound of its loop, answers the commit
  index, so the loop finds nothing to add.
* **Pre-vote** (Raft thesis 9.6, as etcd's ``PreVote``). pysyncobj starts an
  election, bumping its term, as soon as its timer runs out, so a node that
  was paused, restarted or cut off deposes a healthy leader when it comes
  back. Here a node whose timer ran out first asks its peers whether they
  would vote for it at the next term; they say yes only when its log is as
  up to date as theirs and they have not heard from a leader within the
  minimum election timeout. Only with a majority of yeses does pysyncobj's
  own election start. A leadership transfer (``TimeoutNow``) skips it.
* **A leader that hangs up is gone.** When the connection to the leader drops
  (its process died: the kernel closed its sockets), a follower forgets the
  leader's lease and runs its election timer out after a short random delay
  (``LEADER_LOST_DELAY_S``) instead of the full timeout. A leader that is
  only slow or cut off by the network still gets the full timeout.
* **Peers dialled through another port** (``DialNode``): ``[raft] links``
  maps "a>b" to the port node a dials to reach node b (a proxy of ``om chaos``
  that can cut the link); b is still known by its own address. A snapshot's
  ring (which pysyncobj adopts with dynamic membership) keeps them.
* **Handing leadership away** (``om_transfer_requested``): pysyncobj's
  ``transferLeadership`` (Raft's TimeoutNow to the most caught-up connected
  follower) must run on the tick thread; another thread (or the parent
  process, through the Raft child) sets the flag and the next tick acts on it.
  pysyncobj refuses when no follower is fully caught up; the caller asks again.
  ``om_transfers`` (``transfer.py``) aims a transfer at a named follower, with
  reasons for a refusal, and holds new entries until the target has caught up.
* **Membership** (``om_membership``, ``membership.py``): voters added and
  removed one at a time with etcd's strict checks, on the tick thread. Built
  with ``self_address=None`` the node is a learner (pysyncobj's read-only
  node): it receives the log and never campaigns (no pre-votes either), and
  compacts without pysyncobj's rank-staggering (which needs an own id).
* **Frames sealed with AES-GCM** (``frame_cipher.py``): with a cluster secret,
  pysyncobj's Fernet encryptor is replaced right after it is built by one with
  the same three methods, 25 to 50 times cheaper per frame.
* **A compaction cut short keeps its journal** (``_SyncObj__loadDumpFile``, the
  deserializer hook). A snapshot is renamed into place before the journal drops
  the entries it covers; a node killed in between restarts with the new
  snapshot and the older journal, which pysyncobj cleared whole, entries after
  the snapshot included: acknowledged writes lost when a majority died there.
  At start the journal is compacted to the snapshot first, as the cut
  compaction would have done, so pysyncobj's check finds it aligned.
* **One pickle, protocol 5.** The ``@replicated`` wrapper pickles its
  arguments with protocol 2, which inflates ``bytes`` ~1.5x in the journal
  and on the wire. ``submit`` builds the same command (method id, arguments)
  with protocol 5 and queues it through pysyncobj's ``_applyCommand``, which
  is what the wrapper calls; apply unpickles either protocol.
"""

from __future__ import annotations

import logging
import pickle
import random
import time
from collections.abc import Callable
from typing import Any

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated
from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.node import TCPNode
from pysyncobj.poller import POLL_EVENT_TYPE

from om.config import NodeAddress
from om.consensus.port import Applied, ApplyEntry
from om.consensus.pysyncobj.frame_cipher import AeadFrames
from om.consensus.pysyncobj.journal import GroupCommitJournal
from om.consensus.pysyncobj.membership import MembershipChanges
from om.consensus.pysyncobj.transfer import Transfers

logger = logging.getLogger(__name__)
_REGULAR_COMMAND = 0  # pysyncobj's _COMMAND_TYPE.REGULAR
_LEADER = 2            # pysyncobj's _RAFT_STATE.LEADER
_CANDIDATE = 1         # pysyncobj's _RAFT_STATE.CANDIDATE
LEADER_LOST_DELAY_S = (0.02, 0.15)
Callback = Callable[[Any, int], None]


class RaftLog(SyncObj):  # type: ignore[misc]
    """pysyncobj's SyncObj with the overrides above.

    ``om_journal`` and ``om_compress`` are read by ``GroupCommitTransport``
    while ``SyncObj.__init__`` builds it, and ``om_answering_prev`` whenever it
    sends an append's answer."""

    _SyncObj__raftElectionDeadline: float  # pysyncobj's attributes used here
    _SyncObj__raftState: int
    _SyncObj__raftCommitIndex: int

    def __init__(self, self_address: str | None, others: list[Any], conf: SyncObjConf,
                 apply_entry: ApplyEntry, compress: bool, transport_class: type) -> None:
        self._apply_entry = apply_entry
        self.om_compress = compress
        self._committing = False           # pysyncobj's commit step is running
        self._leader_heard_s = 0.0         # when an append from the leader last came
        self._pre_votes: set[Any] = set()  # who said yes in the current round
        self._pre_vote_won_term = -1       # the term whose pre-vote this node won
        self._probing: dict[Any, int] = {}  # follower -> next index its last reset asked
        self.om_answering_prev: int | None = None
        self.om_transfer_requested = False  # set anywhere; acted on by the next tick
        # the node's store is being installed from a snapshot (child.py): it follows and
        # votes on its log as ever, but does not campaign
        self.om_catching_up = False
        self.om_transfers = Transfers(self, self._append)
        self.om_membership = MembershipChanges(self)
        self._dialled = {str(n.id): n for n in others if isinstance(n, DialNode)}
        if self_address is None:
            # pysyncobj staggers compactions by the node's rank among the member ids,
            # and a read-only node has none (AttributeError on its None): a learner
            # compacts on its own schedule.
            conf.logCompactionSplit = False
        # Read (through ``encryptor``) by the transport as it builds its connections,
        # inside SyncObj.__init__: set before it.
        self._om_encryptor = AeadFrames.from_secret(conf.password) if conf.password else None
        self._loading_own_dump = False     # inside the load of this node's dump at start
        if conf.deserializer is not None:
            conf.deserializer = self._aligning(conf.deserializer)
        super().__init__(self_address, others, conf, transportClass=transport_class)
        self._persist_id = self._methodToID[self._getFuncName("persist")]

    def om_compact_now(self) -> None:
        """Snapshots and compacts the journal at the next tick (a Prepare's apply asks,
        om/executor/admin/upgrade.py). pysyncobj staggers compactions over each node's slot of
        ``compaction_min_time_s``, which a forced one waits for too: the staggering is
        turned off for the rest of this process's life, so every node compacts at once
        (after the restart that usually follows a prepare it is on again)."""
        self._SyncObj__conf.logCompactionSplit = False
        self.forceLogCompaction()

    # -- what the adapters read and do (replicator.py, child.py): pysyncobj's private
    # -- members are touched in this package's tick-side modules only

    def om_is_leader(self) -> bool:
        """Whether this node is the Raft leader now."""
        return bool(self._isLeader())

    def om_candidate(self) -> bool:
        """Whether this node is campaigning now."""
        return bool(self._SyncObj__raftState == _CANDIDATE)

    def om_watch(self, fd: int, callback: Callable[[int, int], None]) -> None:
        """Has the tick's poller call ``callback`` when ``fd`` is readable or fails."""
        self._poller.subscribe(fd, callback, POLL_EVENT_TYPE.READ | POLL_EVENT_TYPE.ERROR)

    def om_destroy(self) -> None:
        """Stops this node's Raft from the tick's own thread (no tick thread to join)."""
        self._destroy()

    def om_restart_transmissions(self) -> None:
        """Drops snapshot transmissions to followers that began with the previous dump.

        pysyncobj's own serializers do this on success; its serializeChecker path does
        not. A follower would then get the old file's state while the leader moves its
        next index past the new dump's position: the entries in between never reach
        it (tests/test_crash_restart.py caught the divergence). Restarted, they send
        the new file from its start."""
        serializer = self._SyncObj__serializer
        transmissions: dict[Any, dict[str, Any]] = serializer._Serializer__transmissions
        for transmission in transmissions.values():
            if "file" in transmission:
                transmission["file"].close()
        serializer._Serializer__transmissions = {}

    @property
    def om_journal(self) -> Any:
        """The journal pysyncobj built (a ``GroupCommitJournal`` for a registered path)."""
        return self._SyncObj__raftLog

    @property
    def encryptor(self) -> AeadFrames | None:
        """The frames' cipher: AES-GCM in place of pysyncobj's Fernet (None without a
        secret)."""
        return self._om_encryptor

    @replicated  # type: ignore[untyped-decorator]
    def persist(self, entry: bytes) -> tuple[Applied, int]:
        """Applies ``entry`` at its position; returns the result and the apply time."""
        started = time.perf_counter_ns()
        result = self._apply_entry(self.raftLastApplied + 1, entry)
        return result, time.perf_counter_ns() - started

    def submit(self, entry: bytes, callback: Callback) -> None:
        """Queues ``entry`` for replication; ``callback(result, reason)`` runs on the
        tick thread once it is applied here or failed. While a leadership transfer is
        pending the entry is held (``transfer.py``)."""
        if not self.om_transfers.hold(entry, callback):
            self._append(entry, callback)

    def _append(self, entry: bytes, callback: Callback) -> None:
        command = pickle.dumps((self._persist_id, (entry,)), protocol=5)
        self._applyCommand(command, callback, _REGULAR_COMMAND)

    # -- pre-vote ------------------------------------------------------------------------

    def _onTick(self, timeToWait: float = 0.0) -> None:
        """pysyncobj's tick, with a pre-vote round in place of an election that is due,
        a requested leadership transfer, and commits that count the leader only for
        entries on its disk."""
        self._pre_vote_if_due()
        if self.om_transfer_requested:
            self.om_transfer_requested = False
            self.transferLeadership(callback=_log_transfer)
        self.om_transfers.tick()
        self.om_membership.tick()
        self._commit_synced()
        self._committing = self._SyncObj__raftState == _LEADER
        try:
            super()._onTick(timeToWait)
        finally:
            self._committing = False

    # -- commits -----------------------------------------------------------------------

    def _commit_synced(self) -> None:
        """Raft's commit rule, the leader counted only up to its journal's synced index
        (pysyncobj's own journals never sync: with them it counts for its whole log,
        as pysyncobj does)."""
        if self._SyncObj__raftState != _LEADER:
            return
        last = SyncObj._SyncObj__getCurrentLogIndex(self)
        journal = self._SyncObj__raftLog
        own = min(journal.synced_index, last) if isinstance(journal, GroupCommitJournal) \
            else last
        match: dict[Any, int] = self._SyncObj__raftMatchIndex
        held = sorted([own, *(match.get(node, 0) for node in self._SyncObj__otherNodes)],
                      reverse=True)
        index = held[len(held) // 2]       # the highest index a majority holds
        if index <= self._SyncObj__raftCommitIndex:
            return
        entries = self._SyncObj__getEntries(index, 1)
        if not entries or entries[0][2] != self.raftCurrentTerm:
            return   # Raft commits an older term's entries only through one of its own
        self._SyncObj__raftCommitIndex = index
        journal.setRaftCommitIndex(index)

    def _SyncObj__getCurrentLogIndex(self) -> int:
        """pysyncobj's, except while its commit step runs on a leader: the commit
        index, so that the step (which counts the leader for every entry) adds
        nothing to what ``_commit_synced`` decided."""
        if self._committing and self._SyncObj__raftState == _LEADER:
            return self._SyncObj__raftCommitIndex
        index: int = SyncObj._SyncObj__getCurrentLogIndex(self)
        return index

    def _SyncObj__applyLogEntries(self) -> bool:
        """pysyncobj's; it runs right after the commit step, which ends here."""
        self._committing = False
        needed: bool = SyncObj._SyncObj__applyLogEntries(self)
        return needed

    def _pre_vote_if_due(self) -> None:
        now = monotonic_time()
        if (self.selfNode is None     # a learner (read-only node) never campaigns
                or self._SyncObj__raftState == _LEADER
                or self._SyncObj__raftElectionDeadline >= now
                or self._SyncObj__transferInProgress
                or not self._SyncObj__connectedToAnyone()):
            return
        if self.om_catching_up:       # a leader whose store is not there could not serve
            self._SyncObj__raftElectionDeadline = now + self._SyncObj__generateRaftTimeout()
            return
        if self._pre_vote_won_term == self.raftCurrentTerm:
            self._pre_vote_won_term = -1
            return  # won: pysyncobj campaigns in this tick
        self._SyncObj__raftElectionDeadline = now + self._SyncObj__generateRaftTimeout()
        self._pre_votes = {self.selfNode}
        request = {"type": "pre_vote", "term": self.raftCurrentTerm + 1,
                   "last_log_index": self._SyncObj__getCurrentLogIndex(),
                   "last_log_term": self._SyncObj__getCurrentLogTerm()}
        for other in self.otherNodes:
            self._SyncObj__transport.send(other, request)
        self._count_pre_votes()

    def _answer_pre_vote(self, node: Any, message: dict[str, Any]) -> None:
        ours = (self._SyncObj__getCurrentLogTerm(), self._SyncObj__getCurrentLogIndex())
        in_lease = self._SyncObj__raftState == _LEADER or (
            self._getLeader() is not None
            and monotonic_time() - self._leader_heard_s < self.conf.raftMinTimeout)
        granted = (message["term"] > self.raftCurrentTerm and not in_lease
                   and (message["last_log_term"], message["last_log_index"]) >= ours)
        self._SyncObj__transport.send(node, {"type": "pre_vote_response",
                                             "term": message["term"], "granted": granted})

    def _take_pre_vote(self, node: Any, message: dict[str, Any]) -> None:
        if (message["granted"] and message["term"] == self.raftCurrentTerm + 1
                and self._SyncObj__raftState != _LEADER):
            self._pre_votes.add(node)
            self._count_pre_votes()

    def _count_pre_votes(self) -> None:
        if len(self._pre_votes) > (len(self.otherNodes) + 1) / 2:
            self._pre_votes = set()
            self._pre_vote_won_term = self.raftCurrentTerm
            self._SyncObj__raftElectionDeadline = 0.0  # campaign at the next tick

    def om_peer_disconnected(self, node: Any) -> None:
        """The transport lost its connection to ``node``. A leader forgets what the
        follower acknowledged (it may come back with less: restarted, wiped), so its
        resets count again; a follower whose leader it was treats it as gone."""
        if self._SyncObj__raftState == _LEADER:
            match: dict[Any, int] = self._SyncObj__raftMatchIndex
            if node in match:
                match[node] = 0
            self._probing.pop(node, None)
            return
        if node != self._getLeader():
            return
        self._leader_heard_s = 0.0
        soon = monotonic_time() + random.uniform(*LEADER_LOST_DELAY_S)
        self._SyncObj__raftElectionDeadline = min(self._SyncObj__raftElectionDeadline, soon)

    # -- the snapshot found at start ----------------------------------------------------

    def _SyncObj__loadDumpFile(self, clearJournal: bool) -> None:
        """pysyncobj's, told apart from the install of a leader's snapshot (which
        clears the journal anyway) so that the deserializer aligns the journal."""
        self._loading_own_dump = not clearJournal
        try:
            SyncObj._SyncObj__loadDumpFile(self, clearJournal)
        finally:
            self._loading_own_dump = False

    def _aligning(self, deserialize: Callable[[str], Any]) -> Callable[[str], Any]:
        """The deserializer hook, followed at start by the journal compaction a kill
        may have cut short (``GroupCommitJournal.align_to_dump``): pysyncobj compares
        the journal's head with the dump right after this returns, and clears the
        journal, entries after the dump included, when they differ. The hook returns
        (last applied entry, the one before it, members)."""
        def deserialize_then_align(file_name: str) -> Any:
            raft_data = deserialize(file_name)
            journal = self._SyncObj__raftLog
            if (self._loading_own_dump and isinstance(journal, GroupCommitJournal)
                    and isinstance(raft_data, tuple) and len(raft_data) == 3
                    and journal.align_to_dump(raft_data[1], raft_data[0])):
                logger.warning("the journal still held entries its snapshot covers (a "
                               "compaction cut short): dropped them, kept %d after it",
                               len(journal) - 2)
            return raft_data
        return deserialize_then_align

    def _SyncObj__updateClusterConfiguration(self, newNodes: list[Any]) -> None:
        """pysyncobj's, keeping each peer this node dials through a link as configured:
        a snapshot carries the ring as its maker saw it (with the maker's own links),
        and with dynamic membership pysyncobj replaces the ring with it. A dump made
        while its maker was a learner names the maker as None (its ``selfNode``):
        pysyncobj would fail to load it once the node is a voter, so None is dropped."""
        newNodes = [n for n in newNodes if n is not None]
        ids = [str(n.id) if isinstance(n, TCPNode) else str(n) for n in newNodes]
        SyncObj._SyncObj__updateClusterConfiguration(
            self, [self._dialled.get(i, node) for i, node in zip(ids, newNodes, strict=True)])

    # -- message handling ------------------------------------------------------------------

    def _SyncObj__onMessageReceived(self, node: Any, message: Any) -> None:
        """pysyncobj's handler, with pre-votes, the leader's lease, and a plain success
        that never rewinds nextIndex."""
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == "pre_vote":
            self._answer_pre_vote(node, message)
            return
        if kind == "pre_vote_response":
            self._take_pre_vote(node, message)
            return
        if kind == "append_entries":
            self._answer_append(node, message)
            return
        if kind == "next_node_idx":
            self._take_append_answer(node, message)
            return
        SyncObj._SyncObj__onMessageReceived(self, node, message)

    def _answer_append(self, node: Any, message: dict[str, Any]) -> None:
        """pysyncobj's handling; the answer says which append it answers
        (``om_answering_prev``, read by the transport)."""
        if message["term"] >= self.raftCurrentTerm:
            self._leader_heard_s = monotonic_time()
        self.om_answering_prev = message.get("prevLogIdx")
        try:
            SyncObj._SyncObj__onMessageReceived(self, node, message)
        finally:
            self.om_answering_prev = None

    def _take_append_answer(self, node: Any, message: dict[str, Any]) -> None:
        """pysyncobj's handling, except that nextIndex moves back only for a current
        reset: not for a plain success, nor for a reset at or below what the
        follower acknowledged, nor one answering an append sent before the last
        reset was acted on (``_probing``: the next index that reset asked for)."""
        if message["success"] and not message["reset"]:
            self._probing.pop(node, None)
            next_index: dict[Any, int] = self._SyncObj__raftNextIndex
            before = next_index.get(node)
            SyncObj._SyncObj__onMessageReceived(self, node, message)
            if before is not None and next_index.get(node, before) < before:
                next_index[node] = before
            return
        if message["reset"] and self._stale_reset(node, message):
            message = {**message, "reset": False}
        elif message["reset"]:
            self._probing[node] = message["next_node_idx"]
        SyncObj._SyncObj__onMessageReceived(self, node, message)

    def _SyncObj__onBecomeLeader(self) -> None:
        """pysyncobj's, after forgetting the probes of an earlier term: it sets every
        follower's nextIndex past its own log, so a probe left from a term this node
        led before would make every reset that answers the new appends look stale, and
        a follower whose log is shorter would never be repaired (om/sim found it: a
        leader deposed and re-elected while probing a restarted follower left it
        behind for good, seed 16)."""
        self._probing.clear()
        SyncObj._SyncObj__onBecomeLeader(self)

    def _stale_reset(self, node: Any, message: dict[str, Any]) -> bool:
        """Whether a reset answers an append older than the last reset acted on: not the
        probe that reset started, nor the latest append sent (pysyncobj sends on past a
        probe without waiting for its answer: to a follower cut off meanwhile, the
        leader's nextIndex runs ahead, and the resets that answer its appends once it is
        back must count, or it is never repaired; om/sim seed 1458). A stale reset taken
        for a current one costs a resend, never an entry."""
        if message["next_node_idx"] <= self._SyncObj__raftMatchIndex.get(node, 0):
            return True
        probing = self._probing.get(node)
        answering = message.get("for_prev")
        if probing is None or answering is None:
            return False
        latest = self._SyncObj__raftNextIndex.get(node, 0) - 1
        return answering not in (probing - 1, latest)


def _log_transfer(result: Any, reason: int) -> None:
    """pysyncobj's answer to a transfer request (sent, or refused and why)."""
    if reason == FAIL_REASON.SUCCESS:
        logger.warning("handing leadership to the most caught-up follower (TimeoutNow sent)")
    else:
        logger.warning("leadership transfer refused by pysyncobj (reason %s): asking again "
                       "later", reason)


def known_leader(raft: SyncObj) -> str:
    """The Raft address of the leader this node follows, or "" when it has none or
    has lost its connection to it (clients are then told to retry, not sent to a
    node that is gone)."""
    leader = raft._getLeader()
    if leader is None:
        return ""
    if leader != raft.selfNode and not raft.isNodeConnected(leader):
        return ""
    return str(leader.id)


class DialNode(TCPNode):  # type: ignore[misc]
    """A peer known by its own address but dialled at another port."""

    def __init__(self, address: str, dial_port: int) -> None:
        super().__init__(address)
        self._dial_port = dial_port

    @property
    def port(self) -> int:
        return self._dial_port


def peers(node: NodeAddress, nodes: tuple[NodeAddress, ...], links: dict[str, int]) -> list[Any]:
    """The other voters, as pysyncobj wants them: a DialNode where ``links`` names a
    port to dial ("a>b"), else the Raft address."""
    found: list[Any] = []
    for other in nodes:
        if other.id == node.id or other.learner:   # a learner is no one's peer
            continue
        dial = links.get(f"{node.id}>{other.id}")
        found.append(other.raft_address if dial is None else DialNode(other.raft_address, dial))
    return found


def own_address(node: NodeAddress) -> str | None:
    """The address a RaftLog is built with: none for a learner (a read-only node)."""
    return None if node.learner else node.raft_address
