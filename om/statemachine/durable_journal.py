"""An opt-in durable Raft journal for pysyncobj (``[raft] fsync = true``).

pysyncobj never syncs its journal: entries live in an mmap'd file and its
meta file (term, vote) is renamed into place without fsync. That survives a
process crash (the page cache does) but not power loss. This journal msyncs
every appended entry before pysyncobj acknowledges or votes on it, and fsyncs
the meta file and its directory whenever the term or vote changes, so an
acknowledged write survives power loss on a majority of nodes.

pysyncobj builds its journal with a module-level factory and offers no hook,
so ``install`` replaces that factory in the server process (one SyncObj per
process). The cost is measured in the README's durability section.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pysyncobj import journal as pysyncobj_journal
from pysyncobj import syncobj as pysyncobj_syncobj


def _fsync_path(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class DurableFileJournal(pysyncobj_journal.FileJournal):  # type: ignore[misc]
    """FileJournal that syncs each entry, and the term and vote, before returning."""

    def __init__(self, journal_file: str) -> None:
        super().__init__(journal_file)
        self._meta_path = Path(journal_file + ".meta")

    def add(self, command: Any, idx: int, term: int) -> None:
        super().add(command, idx, term)
        self.flush()

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        super().setCurrentTerm(term, votedForNodeId)
        _fsync_path(self._meta_path)
        _fsync_path(self._meta_path.parent)


def _create_journal(journal_file: str | None = None) -> Any:
    if journal_file is None:
        return pysyncobj_journal.MemoryJournal()
    return DurableFileJournal(journal_file)


def install() -> None:
    """Makes every SyncObj created from now on in this process use the durable journal."""
    pysyncobj_syncobj.createJournal = _create_journal
