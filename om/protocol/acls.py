"""Ozone's native ACL entries: their text form, their rules, and the wire message.

One model for the shell, the client and the server, so an ACL reads and
behaves the same everywhere. ``Acl`` is an immutable entry: an identity (USER,
GROUP, WORLD, ANONYMOUS), a name, a set of rights kept as a bit set (bit i is
``OzoneAcl.Right`` i, Ozone's ``ACLType`` order) and a scope (ACCESS or DEFAULT).

The text form is Ozone's ``OzoneAcl.parseAcl``: ``type:name:rights[SCOPE]``
(``user:bob:rw``, ``group:dev:rwxy[DEFAULT]``, ``world::r``); rights are the
letters r w c l d x y a n (READ, WRITE, CREATE, LIST, DELETE, READ_ACL,
WRITE_ACL, ALL, NONE); the scope defaults to ACCESS. We are stricter than Ozone
where it silently accepts nonsense (extra ``:`` parts, an empty rights set):
those are ``AclError``. ``str(acl)`` is Ozone's ``OzoneAcl.toString``,
``USER:bob:rw[ACCESS]``.

The rules are Ozone's ``OzoneAcl`` and ``OzoneAclUtil``: an entry grants a
right when it has that right or ALL, and never when it has NONE; adding an
entry to a list ORs its rights into the entry of the same (type, name, scope)
or appends it; removing clears rights and drops an entry left with none; an
entry that changes moves to the end of the list, as Ozone's does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from om.protocol import om_pb2

Identity = om_pb2.OzoneAcl.Identity
Right = om_pb2.OzoneAcl.Right
Scope = om_pb2.OzoneAcl.Scope
IdentityValue: TypeAlias = om_pb2.OzoneAcl.Identity.ValueType
RightValue: TypeAlias = om_pb2.OzoneAcl.Right.ValueType
ScopeValue: TypeAlias = om_pb2.OzoneAcl.Scope.ValueType

USER, GROUP = om_pb2.OzoneAcl.USER, om_pb2.OzoneAcl.GROUP
WORLD, ANONYMOUS = om_pb2.OzoneAcl.WORLD, om_pb2.OzoneAcl.ANONYMOUS
ACCESS, DEFAULT = om_pb2.OzoneAcl.ACCESS, om_pb2.OzoneAcl.DEFAULT
READ, WRITE, CREATE = om_pb2.OzoneAcl.READ, om_pb2.OzoneAcl.WRITE, om_pb2.OzoneAcl.CREATE
LIST, DELETE = om_pb2.OzoneAcl.LIST, om_pb2.OzoneAcl.DELETE
READ_ACL, WRITE_ACL = om_pb2.OzoneAcl.READ_ACL, om_pb2.OzoneAcl.WRITE_ACL
ALL, NONE = om_pb2.OzoneAcl.ALL, om_pb2.OzoneAcl.NONE

# Ozone's letters, in bit order (OzoneConsts.OZONE_ACL_*).
LETTERS: dict[RightValue, str] = {READ: "r", WRITE: "w", CREATE: "c", LIST: "l", DELETE: "d",
                                  READ_ACL: "x", WRITE_ACL: "y", ALL: "a", NONE: "n"}
_BY_LETTER = {letter: right for right, letter in LETTERS.items()}
_ALL_BITS = (1 << len(LETTERS)) - 1
_SCOPED = re.compile(r"^(.*)\[(ACCESS|DEFAULT)\]$")
_BAD_NAME = re.compile(r"[:,\s\x00-\x1f\x7f]")
_FORMAT = "use type:name:rights[SCOPE], e.g. user:bob:rw or group:dev:rwxy[DEFAULT]"
ENTRIES_MAX = 1000   # entries one object's ACL holds at most (its row stays well under a batch)


class AclError(ValueError):
    """An ACL is malformed; the message says what and how to write it."""


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a USER or GROUP entry, or None. A user must be such a
    name too: the creator of a volume, bucket or key gets an entry under it."""
    if _BAD_NAME.search(name):
        return "holds ':', ',', a space or a control character"
    return None


def bit(right: RightValue) -> int:
    """The bit of ``right`` in an entry's bit set."""
    assert right in LETTERS
    return 1 << right


@dataclass(frozen=True)
class Acl:
    """One valid ACL entry. Build it with ``parse``, ``from_proto`` or ``make``.

    Invariants (``make`` checks them): USER and GROUP have a name without
    ``:``, ``,``, spaces or control characters; WORLD and ANONYMOUS are named
    after their type; ``bits`` is a non-empty subset of the nine rights.
    """

    identity: IdentityValue
    name: str
    bits: int
    scope: ScopeValue = ACCESS

    def grants(self, right: RightValue) -> bool:
        """Ozone's ``OzoneAcl.checkAccess``: (right or ALL) and not NONE."""
        if self.bits & bit(NONE):
            return False
        return bool(self.bits & (bit(right) | bit(ALL)))

    def same_entry(self, other: Acl) -> bool:
        """Same (type, name, scope): the entries add and remove act on together."""
        return (self.identity, self.name, self.scope) == (other.identity, other.name,
                                                          other.scope)

    @property
    def rights(self) -> list[RightValue]:
        """The rights, in Ozone's order."""
        return [right for right in LETTERS if self.bits & bit(right)]

    @property
    def letters(self) -> str:
        """The rights as letters, in Ozone's order (``rwxy``)."""
        return "".join(LETTERS[right] for right in self.rights)

    def __str__(self) -> str:
        """Ozone's ``OzoneAcl.toString``: ``USER:bob:rw[ACCESS]``."""
        return (f"{Identity.Name(self.identity)}:{self.name}:{self.letters}"
                f"[{Scope.Name(self.scope)}]")

    def with_bits(self, bits: int) -> Acl:
        """This entry with other rights (possibly none: callers drop such entries)."""
        return Acl(self.identity, self.name, bits, self.scope)

    def with_scope(self, scope: ScopeValue) -> Acl:
        """This entry in another scope (DEFAULT entries become ACCESS in a child)."""
        return Acl(self.identity, self.name, self.bits, scope)

    def to_proto(self) -> om_pb2.OzoneAcl:
        """The wire and row form: rights distinct and ascending, so rows compare by bytes."""
        return om_pb2.OzoneAcl(type=self.identity, name=self.name, rights=self.rights,
                               scope=self.scope)


def make(identity: int, name: str, bits: int, scope: int = ACCESS) -> Acl:
    """A checked entry; AclError when it breaks an invariant of ``Acl``.

    WORLD and ANONYMOUS accept the names "", "WORLD" and "ANONYMOUS" and take
    their type's name, as Ozone's ``validateNameAndType`` does.
    """
    if identity not in (USER, GROUP, WORLD, ANONYMOUS):
        raise AclError(f"unknown ACL identity type {identity}: use user, group, world or "
                       "anonymous")
    if scope not in (ACCESS, DEFAULT):
        raise AclError(f"unknown ACL scope {scope}: use ACCESS or DEFAULT")
    if not 0 < bits <= _ALL_BITS:
        raise AclError("an ACL needs at least one right of r w c l d x y a n")
    kind = Identity.Name(Identity.ValueType(identity))
    if identity in (WORLD, ANONYMOUS):
        if name not in ("", "WORLD", "ANONYMOUS"):
            raise AclError(f"a {kind.lower()} ACL takes no name (write {kind.lower()}::r), "
                           f"not '{name}'")
        name = kind
    elif not name:
        raise AclError(f"a {kind.lower()} ACL needs a name, e.g. {kind.lower()}:bob:r")
    elif (problem := name_problem(name)) is not None:
        raise AclError(f"ACL name {name!r} {problem}")
    return Acl(Identity.ValueType(identity), name, bits, Scope.ValueType(scope))


def from_proto(message: om_pb2.OzoneAcl) -> Acl:
    """The checked entry of a wire or row message; AclError when it is malformed."""
    bits = 0
    for right in message.rights:
        if right not in LETTERS:
            raise AclError(f"unknown ACL right {right}")
        bits |= bit(right)
    return make(message.type, message.name, bits, message.scope)


def parse(text: str) -> Acl:
    """One entry from ``type:name:rights[SCOPE]``; AclError with the reason."""
    stripped = text.strip()
    parts = stripped.split(":")
    if not stripped or len(parts) != 3:
        raise AclError(f"invalid ACL '{text}': {_FORMAT}")
    kind, name, rights = parts
    scope = ACCESS
    scoped = _SCOPED.match(rights)
    if scoped is not None:
        rights, scope = scoped.group(1), Scope.Value(scoped.group(2))
    try:
        identity = Identity.Value(kind.upper())
    except ValueError:
        raise AclError(f"invalid ACL '{text}': unknown type '{kind}' (use user, group, world "
                       "or anonymous)") from None
    bits = 0
    for letter in rights:
        if letter not in _BY_LETTER:
            raise AclError(f"invalid ACL '{text}': [{letter}] ACL right is not recognized "
                           "(r w c l d x y a n)")
        bits |= bit(_BY_LETTER[letter])
    try:
        return make(identity, name, bits, scope)
    except AclError as error:
        raise AclError(f"invalid ACL '{text}': {error}") from None


def parse_list(texts: Iterable[str]) -> list[Acl]:
    """Entries from option values, each a comma-separated list (Ozone's ``split = ","``)."""
    return [parse(part) for text in texts for part in text.split(",")]


def from_protos(messages: Iterable[om_pb2.OzoneAcl]) -> list[Acl]:
    """The entries of a row (or request); AclError on a malformed one."""
    return [from_proto(message) for message in messages]


def to_protos(acls: Iterable[Acl]) -> list[om_pb2.OzoneAcl]:
    """The wire form of ``acls``, in order."""
    return [acl.to_proto() for acl in acls]


def add(acls: Sequence[Acl], new: Acl) -> tuple[list[Acl], bool]:
    """Ozone's ``OzoneAclUtil.addAcl``: (the list with ``new`` ORed in, whether it changed).

    A changed entry moves to the end; an entry already holding every right of
    ``new`` leaves the list as it was.
    """
    for n, acl in enumerate(acls):
        if acl.same_entry(new):
            if acl.bits | new.bits == acl.bits:
                return list(acls), False
            rest = [*acls[:n], *acls[n + 1:]]
            return [*rest, acl.with_bits(acl.bits | new.bits)], True
    return [*acls, new], True


def add_all(acls: Sequence[Acl], new: Iterable[Acl]) -> list[Acl]:
    """``acls`` with each of ``new`` added in turn."""
    result = list(acls)
    for acl in new:
        result, _ = add(result, acl)
    return result


def remove(acls: Sequence[Acl], gone: Acl) -> tuple[list[Acl], bool]:
    """Ozone's ``OzoneAclUtil.removeAcl``: (the list without ``gone``'s rights, changed?).

    An entry left with no rights is dropped; one that keeps some moves to the end.
    """
    for n, acl in enumerate(acls):
        if acl.same_entry(gone):
            left = acl.bits & ~gone.bits
            if left == acl.bits:
                return list(acls), False
            rest = [*acls[:n], *acls[n + 1:]]
            return (rest if not left else [*rest, acl.with_bits(left)]), True
    return list(acls), False


def inherited(parent: Iterable[Acl]) -> list[Acl]:
    """What a child inherits at create: the parent's DEFAULT entries, as ACCESS entries
    (Ozone's ``OzoneAclUtil.inheritDefaultAcls`` with scope ACCESS)."""
    return [acl.with_scope(ACCESS) for acl in parent if acl.scope == DEFAULT]
