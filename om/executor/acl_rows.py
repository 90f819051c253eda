"""ACLs on rows: what a new volume, bucket or key starts with, and the rows ACL requests change.

At create, as Ozone's OM does (``OzoneAclUtil.getDefaultAclList`` with the
default ``ozone.om.user.rights = ALL`` and ``ozone.om.group.rights = READ,
LIST``):

* a volume gets ``USER:<owner>:a`` and ``GROUP:<owner's primary group>:rl``;
* a bucket gets the same for the user who creates it, plus its volume's
  DEFAULT entries as ACCESS entries;
* a key gets the same for its creator, plus its bucket's DEFAULT entries as
  ACCESS entries (a volume's DEFAULT entries reach keys only through a bucket
  created after they were set, as in Ozone).

The primary group is the first group the configured mapping gives the user, else
the first its client certificate names (``ExecContext.user_groups``); a user with
none gets no GROUP entry.
"""

from __future__ import annotations

from dataclasses import dataclass

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.errors import OMError
from om.executor.rows import encode, load_bucket, load_volume, require_key
from om.protocol import acls, om_pb2
from om.protocol.acls import Acl
from om.schema import tables
from om.schema.read_view import ReadView
from om.schema.tables import TableId

USER_RIGHTS = acls.bit(acls.ALL)
GROUP_RIGHTS = acls.bit(acls.READ) | acls.bit(acls.LIST)

Row = om_pb2.VolumeInfo | om_pb2.BucketInfo | om_pb2.KeyInfo


def creator_acls(user: str, ctx: ExecContext) -> list[Acl]:
    """Ozone's default list for ``user``: ALL for the user, READ and LIST for its primary group.

    PERMISSION_DENIED for an anonymous request (no user, possible only on an insecure
    cluster): an entry needs a name, and Ozone never creates without a caller's UGI.
    """
    if not user:
        raise OMError(om_pb2.PERMISSION_DENIED, "an anonymous request (no user) may not "
                      "create a volume, bucket or key: send a user name, a certificate or "
                      "a delegation token")
    entries = [acls.make(acls.USER, user, USER_RIGHTS)]
    groups = ctx.user_groups(user)
    if groups:
        entries.append(acls.make(acls.GROUP, groups[0], GROUP_RIGHTS))
    return entries


def child_acls(creator: str, parent: Row, ctx: ExecContext) -> list[om_pb2.OzoneAcl]:
    """A new bucket's (parent: its volume) or key's (parent: its bucket) entries."""
    inherited = acls.inherited(acls.from_protos(parent.acls))
    return acls.to_protos(acls.add_all(creator_acls(creator, ctx), inherited))


def volume_acls(owner: str, ctx: ExecContext) -> list[om_pb2.OzoneAcl]:
    """A new volume's entries: the owner's default list (not the creator's)."""
    return acls.to_protos(creator_acls(owner, ctx))


# ------------------------------------------------------------- ACL requests ---

# The gate (om/gatekeeper/validation.py) checked the object an ACL request names and
# its entries: handlers read them with acls.from_proto, which cannot fail on them.


@dataclass
class AclTarget:
    """The row an ACL request reads or changes, and where it lives."""

    table: TableId
    key: bytes
    row: Row

    @property
    def acls(self) -> list[Acl]:
        """The row's entries (rows hold only valid ones: they were checked on the way in)."""
        return acls.from_protos(self.row.acls)

    def store(self, entries: list[Acl], changed: bool, ctx: ExecContext,
              recorder: ChangeRecorder) -> None:
        """Records the row with ``entries``; an unchanged row is recorded as it was,
        so the write still carries its reply to the retry cache."""
        if changed:
            del self.row.acls[:]
            self.row.acls.extend(acls.to_protos(entries))
            self.row.modification_time = ctx.now_ms
            self.row.update_id = ctx.managed_index
        recorder.put(self.table, self.key, encode(self.row))


def load_target(view: ReadView, obj: om_pb2.OzoneObj) -> AclTarget:
    """The row ``obj`` (a volume, bucket or key, as the gate checked) names; its
    NOT_FOUND status (Ozone's) when it is missing."""
    if obj.res_type == om_pb2.OzoneObj.VOLUME:
        return AclTarget(om_pb2.VOLUME, tables.volume_key(obj.volume),
                         load_volume(view, obj.volume))
    if obj.res_type == om_pb2.OzoneObj.BUCKET:
        return AclTarget(om_pb2.BUCKET, tables.bucket_key(obj.volume, obj.bucket),
                         load_bucket(view, obj.volume, obj.bucket))
    assert obj.res_type == om_pb2.OzoneObj.KEY
    load_bucket(view, obj.volume, obj.bucket)
    return AclTarget(om_pb2.KEY, tables.key_key(obj.volume, obj.bucket, obj.key),
                     require_key(view, obj.volume, obj.bucket, obj.key))
