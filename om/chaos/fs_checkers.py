"""Checkers of the file-system workload: the final tree against the history, quota, audits.

Inputs: the history's ``mkdir``/``create``/``rename``/``rmr`` ops (``om.chaos.history``)
and what was read once the cluster was healed and quiet (``FsObservation``): every
entry of the FSO bucket listed on the leader (ListStatus, recursive), the bucket's
usage read after the purge drained, and each node's audit report.

Every name the workload creates is unique to its op (``d<n>``, ``f<n>``, ``r<n>``,
``om.chaos.fs_workload``), so a name in the final tree says which ops could have
made it, and a path in an op says which directory was, at that moment, the parent
of which. From the non-``fail`` ops (``ok`` or ``info``: each may have applied) the
tree checker derives:

* *makers*: the names an applied op could have created (every component of a
  ``mkdir -p`` path, a created file, a rename's destination);
* *claimed edges*: (parent name, child name) for consecutive components of every
  path such an op named;
* *successors*: a directory renamed from ``.../a`` to ``.../r`` is called ``r`` since.

A directory's parent changes only when that directory is renamed (which renames it
too), so an entry's parent, at the end, carries one of the successor names of a
parent some op claimed for it. The checks, each a necessary condition of some
serial order of the applied ops (so a clean history never fails them), each able
to fail (tests/chaos/test_fs_checkers.py):

* ``unexplained_entry``: a name in the tree that no applied op could have made
  (a failed or never attempted create, or an invented name);
* ``wrong_type``: a file where a directory was made, or the other way round;
* ``misplaced_entry``: an entry whose parent is no successor of any parent claimed
  for it (a rename that moved the wrong rows, a subtree that came loose);
* ``duplicate_entry``: a file or renamed directory twice in the tree (only
  ``mkdir -p`` may make a name again, when a stale path re-creates a parent);
* ``lost_entry``: an ``ok`` mkdir, create or rename whose entry is not in the
  tree under any successor name, while no ``rm -r`` that may have run after it
  was invoked (``ok`` or ``info``, not completed before) targeted a directory that
  could have been its ancestor or itself;
* ``not_a_tree``: the listing names an entry whose parent it did not list;
* ``duplicate_object_id`` among the listed entries;
* ``not_exercised``: no ``ok`` op of one of the four kinds (the run proves nothing
  about it).

The quota checker: once the purge drained, the bucket's ``usedNamespace`` equals
the entries listed and its ``usedBytes`` their files' replicated sizes. The audit
checker: every node answered its audit (``om.integrity``: orphans, cycles,
duplicate names and ids, usage counted with pending deletes) and found nothing.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Final

from om.chaos.checkers import Usage, Violation
from om.chaos.history import RENAME_TO, F, History, Op, Outcome

FS_TREE: Final = "fs_tree"
FS_QUOTA: Final = "fs_quota"
FS_AUDIT: Final = "fs_audit"
FS_FUNCTIONS: Final = (F.MKDIR, F.CREATE, F.RENAME, F.RMR)
ROOT: Final = ""


@dataclass(frozen=True, slots=True)
class FsEntry:
    """One listed entry: its path below the bucket, kind, replicated bytes, object id."""

    path: str
    is_directory: bool
    replicated_bytes: int = 0
    object_id: int = 0


@dataclass(frozen=True, slots=True)
class FsObservation:
    """What was read at the end of a run with the file-system workload.

    ``usage`` is None when it could not be read once the purge drained (the old
    flow has no purge: ``quota_skipped`` says why). ``audits`` maps each node to
    its audit's (category, subject, detail) findings, or to why it did not answer."""

    entries: tuple[FsEntry, ...]
    usage: Usage | None
    audits: Mapping[str, Sequence[tuple[str, str, str]] | str] = field(default_factory=dict)
    nodes: int = 3
    quota_skipped: str = ""


def parts(path: str) -> list[str]:
    """A path's components ("/a/b/" -> ["a", "b"])."""
    return [p for p in path.strip("/").split("/") if p]


def leaf(path: str) -> str:
    return parts(path)[-1]


@dataclass
class _Claims:
    """What the applied (ok or info) file-system ops say about names."""

    makers: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # -> kinds
    parents: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    successors: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    mkdir_names: set[str] = field(default_factory=set)
    removed_until: dict[str, float] = field(default_factory=dict)   # rm -r target -> end

    def claim_path(self, path: str) -> None:
        chain = [ROOT, *parts(path)]
        for parent, child in pairwise(chain):
            self.parents[child].add(parent)

    def successors_of(self, name: str) -> set[str]:
        """``name`` and every name a chain of renames may have given it."""
        found, todo = {name}, [name]
        while todo:
            for after in self.successors.get(todo.pop(), ()):
                if after not in found:
                    found.add(after)
                    todo.append(after)
        return found

    def ancestry(self, name: str) -> set[str]:
        """Every name ``name``'s entry or one of its ancestors may have carried."""
        found = self.successors_of(name)
        todo = list(found)
        while todo:
            for parent in self.parents.get(todo.pop(), ()):
                if parent == ROOT:
                    continue
                for named in self.successors_of(parent) - found:
                    found.add(named)
                    todo.append(named)
        return found


def _claims(ops: Iterable[Op]) -> _Claims:
    claims = _Claims()
    for op in ops:
        if op.outcome is Outcome.FAIL:
            continue
        claims.claim_path(op.key)
        if op.f is F.MKDIR:
            names = parts(op.key)
            claims.mkdir_names.update(names)
            for name in names:
                claims.makers[name].add("directory")
        elif op.f is F.CREATE:
            claims.makers[leaf(op.key)].add("file")
        elif op.f is F.RENAME:
            to = str(op.extra[RENAME_TO])
            claims.claim_path(to)
            claims.makers[leaf(to)].add("directory")
            claims.successors[leaf(op.key)].add(leaf(to))
        elif op.f is F.RMR:
            target = leaf(op.key)
            claims.removed_until[target] = max(claims.removed_until.get(target, -1.0),
                                               op.end_ns)
    return claims


def check_fs_tree(history: History, entries: Sequence[FsEntry]) -> list[Violation]:
    """The final tree against the file-system ops of ``history`` (see the module doc)."""
    ops = history.of(*FS_FUNCTIONS)
    claims = _claims(ops)
    violations = _exercised(ops)
    violations += _listing_shape(entries)
    present: Counter[str] = Counter(leaf(e.path) for e in entries)
    for entry in entries:
        violations += _explained(entry, claims)
    violations += [
        Violation(FS_TREE, "duplicate_entry", f"{name} is in the tree {count} times", name)
        for name, count in sorted(present.items())
        if count > 1 and name not in claims.mkdir_names
    ]
    for op in ops:
        if op.outcome is Outcome.OK and op.f is not F.RMR:
            violations += _lost(op, claims, present)
    return violations


def _exercised(ops: Sequence[Op]) -> list[Violation]:
    done = {op.f for op in ops if op.outcome is Outcome.OK}
    return [Violation(FS_TREE, "not_exercised", f"no {f} succeeded: the run says nothing "
                      "about it", str(f)) for f in FS_FUNCTIONS if f not in done]


def _listing_shape(entries: Sequence[FsEntry]) -> list[Violation]:
    directories = {"/".join(parts(e.path)) for e in entries if e.is_directory}
    violations = []
    for entry in entries:
        parent = "/".join(parts(entry.path)[:-1])
        if parent and parent not in directories:
            violations.append(Violation(FS_TREE, "not_a_tree", f"{entry.path} is listed, "
                                        f"its parent {parent} is not", entry.path))
    holders: dict[int, list[str]] = defaultdict(list)
    for entry in entries:
        if entry.object_id:
            holders[entry.object_id].append(entry.path)
    violations += [Violation(FS_TREE, "duplicate_object_id",
                             f"object id {oid} held by {', '.join(paths)}", str(oid))
                   for oid, paths in sorted(holders.items()) if len(paths) > 1]
    return violations


def _explained(entry: FsEntry, claims: _Claims) -> list[Violation]:
    chain = parts(entry.path)
    name, parent = chain[-1], (chain[-2] if len(chain) > 1 else ROOT)
    kind = "directory" if entry.is_directory else "file"
    if name not in claims.makers:
        return [Violation(FS_TREE, "unexplained_entry", f"{kind} {entry.path}: no ok or info "
                          "op could have made it", entry.path)]
    if kind not in claims.makers[name]:
        return [Violation(FS_TREE, "wrong_type", f"{entry.path} is a {kind}, but only "
                          f"{'/'.join(sorted(claims.makers[name]))} ops made it", entry.path)]
    if not any(parent in claims.successors_of(p) for p in claims.parents.get(name, ())):
        shown = ", ".join(sorted(p or "/" for p in claims.parents.get(name, ()))) or "none"
        return [Violation(FS_TREE, "misplaced_entry", f"{kind} {entry.path}: its parent "
                          f"{parent or '/'} is no successor of a parent ops claimed ({shown})",
                          entry.path)]
    return []


def _lost(op: Op, claims: _Claims, present: Counter[str]) -> list[Violation]:
    name = leaf(str(op.extra[RENAME_TO])) if op.f is F.RENAME else leaf(op.key)
    if any(present[n] for n in claims.successors_of(name)):
        return []
    if any(claims.removed_until.get(a, -1.0) >= op.invoke_ns for a in claims.ancestry(name)):
        return []
    return [Violation(FS_TREE, "lost_entry", f"{op.describe()} acknowledged, not in the tree, "
                      "and no rm -r that may have run after it explains it", name)]


def check_fs_usage(observation: FsObservation) -> list[Violation]:
    """usedNamespace = entries listed, usedBytes = their files' bytes, once purged."""
    if observation.quota_skipped:
        return []
    usage = observation.usage
    if usage is None:
        return [Violation(FS_QUOTA, "not_observed", "no bucket usage read once the purge "
                          "drained; the quota check cannot run")]
    entries = len(observation.entries)
    size = sum(e.replicated_bytes for e in observation.entries)
    violations = []
    if usage.used_namespace != entries:
        violations.append(Violation(FS_QUOTA, "namespace", f"usedNamespace "
                                    f"{usage.used_namespace}, but {entries} entries listed"))
    if usage.used_bytes != size:
        violations.append(Violation(FS_QUOTA, "bytes", f"usedBytes {usage.used_bytes}, but "
                                    f"the listed files hold {size} replicated bytes"))
    return violations


def check_fs_audits(observation: FsObservation) -> list[Violation]:
    """Every node audited its store and found nothing."""
    violations = []
    if len(observation.audits) < observation.nodes:
        violations.append(Violation(FS_AUDIT, "too_few_audits", f"{len(observation.audits)} "
                                    f"of {observation.nodes} nodes audited"))
    for node, found in sorted(observation.audits.items()):
        if isinstance(found, str):
            violations.append(Violation(FS_AUDIT, "not_audited", f"{node}: {found}", node))
            continue
        violations += [Violation(FS_AUDIT, category, f"{node}: {subject}: {detail}", node)
                       for category, subject, detail in found]
    return violations


def check_fs(history: History, observation: FsObservation | None) -> list[Violation]:
    """Every file-system check; file-system ops without an observation fail."""
    if observation is None:
        if not history.of(*FS_FUNCTIONS):
            return []
        return [Violation(FS_TREE, "not_observed", "the history has file-system ops but "
                          "no final tree was read; the checks cannot run")]
    return [*check_fs_tree(history, observation.entries), *check_fs_usage(observation),
            *check_fs_audits(observation)]
