"""Authorization: Ozone's native ACLs, checked on the leader before a request runs.

Permissive unless ``acl_enabled`` (Ozone's ``ozone.acl.enabled``, off by
default). With it on, each request needs one right on one object (two for a
rename), as Ozone's requests ask in ``preExecute`` (``NEEDS`` below):

=====================  ==========================================
CreateVolume           CREATE on the volume (administrators only)
DeleteVolume           DELETE on the volume
SetVolumeProperty      WRITE on the volume (quota); WRITE_ACL (owner)
InfoVolume             READ on the volume
ListVolume             LIST on the root: ``volume_listall_allowed``
CreateBucket           CREATE on the bucket
DeleteBucket           DELETE on the bucket
SetBucketProperty      WRITE on the bucket
InfoBucket             READ on the bucket
ListBuckets            LIST on the volume
CreateKey              CREATE on the key
CommitKey              WRITE on the open key
LookupKey              READ on the key
DeleteKey              DELETE on the key
RenameKey              DELETE on the key, CREATE on the new name
ListKeys               LIST on the bucket
CreateDirectory/File   CREATE on the path (file-system buckets: the bucket's and
                       volume's rights decide; a file's own entries are not
                       consulted yet)
LookupFile, GetFileStatus  READ on the path
ListStatus             LIST on the bucket
PurgeDirectories,      none: the leader's own requests (refused from clients)
PurgeKeys,
DeleteOpenKeys
Initiate/Commit/       WRITE on the key (Ozone's S3 multipart requests);
Complete/Abort-        a part's commit: on the part's open key
MultiPartUpload
ListMultiPartUpload-   READ on the key
Parts
ListMultipartUploads   LIST on the bucket
AbortExpiredMulti-     none: the leader's own (refused from clients)
PartUploads
Create/DeleteSnapshot  WRITE on the bucket (Ozone asks the bucket's owner
                       or an administrator)
GetSnapshotInfo,       READ on the bucket; a read of ``.snapshot/<name>/
SnapshotDiff           <key>``: as a read of that key name
ListSnapshot           LIST on the bucket
Add/Remove/SetAcl      WRITE_ACL on the object
GetAcl                 READ_ACL on the object
*DelegationToken       none: authentication only (om/executor/security/tokens.py
                       checks who may renew or cancel)
*UserCertificate(s)    administrators only (``ADMIN_ONLY``: om admin
                       user add | revoke | list; deny lists first)
Prepare, CancelPrepare administrators only (``ADMIN_ONLY``: om admin om
FinalizeUpgrade        prepare | cancelprepare | finalizeupgrade)
PrepareStatus,         none: anyone may ask
FinalizeUpgrade-
Progress
=====================  ==========================================

Each (object, right) is decided as Ozone's ``OzoneAclUtils.checkAllAcls`` and
``OzoneNativeAuthorizer.checkAccess`` decide it, in their order:

1. the deny lists: a blacklisted user (or group) is refused everything, a
   read-blacklisted one READ, READ_ACL and LIST;
2. administrators (``admins``, ``admin_groups``; ``"*"``: everyone) may do
   anything; read-only administrators may READ, READ_ACL and LIST anything;
3. listing every volume is allowed when ``volume_listall_allowed`` (Ozone's
   default: true), creating a volume never (only administrators);
4. the volume's owner may do anything in the volume; for a bucket or key, a
   user who does not own the volume first needs READ on the volume (WRITE to
   create a bucket), and then the bucket's owner may do anything in the bucket;
5. else the ACLs: the object's entries must grant the right (a CREATE skips the
   object, which does not exist yet), and its parents must grant what Ozone's
   ``getParentNativeAcl`` asks: a key's bucket WRITE for CREATE and WRITE,
   else READ, and its volume READ; a bucket's volume WRITE for CREATE, else READ.

An entry matches the user by name (USER), by one of the user's groups (GROUP), or
always (WORLD, ANONYMOUS, as Ozone's native authorizer treats them). The user's
groups are the configured mapping's, then those its client certificate names
(its OU entries, which the node puts in ``OMRequest.groups``: ``groups_of``). Ozone
consults every entry of an object, DEFAULT ones included, and so does this. A
missing volume, bucket or key is left to the handler, which reports its NOT_FOUND
status; except a key another right than READ, WRITE or CREATE is asked of, which
Ozone reports here as KEY_NOT_FOUND.
A denial is PERMISSION_DENIED, worded as Ozone's: ``User bob doesn't have
WRITE permission to access BUCKET Volume:vol1 Bucket:b1``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeAlias

from om.config import ServerConfig
from om.executor.context import merged_groups
from om.executor.errors import OMError
from om.protocol import acls, om_pb2
from om.protocol.acls import RightValue
from om.schema import tables
from om.schema.read_view import ReadView

ROOT = "/"   # the volume name Ozone checks "list every volume" against
VOLUME, BUCKET, KEY = om_pb2.OzoneObj.VOLUME, om_pb2.OzoneObj.BUCKET, om_pb2.OzoneObj.KEY
Resource: TypeAlias = om_pb2.OzoneObj.ResourceType.ValueType
READS = frozenset({acls.READ, acls.READ_ACL, acls.LIST})
WILDCARD = "*"


@dataclass(frozen=True)
class AclPolicy:
    """Whether ACLs are enforced, who is special, and who is in which group.

    ``groups`` maps a user to its groups; the first is its primary group.
    """

    acl_enabled: bool = False
    admins: frozenset[str] = frozenset()
    admin_groups: frozenset[str] = frozenset()
    readonly_admins: frozenset[str] = frozenset()
    readonly_admin_groups: frozenset[str] = frozenset()
    blacklist_users: frozenset[str] = frozenset()
    blacklist_groups: frozenset[str] = frozenset()
    read_blacklist_users: frozenset[str] = frozenset()
    read_blacklist_groups: frozenset[str] = frozenset()
    volume_listall_allowed: bool = True
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def acl_policy(config: ServerConfig) -> AclPolicy:
    """The policy a server configuration describes."""
    return AclPolicy(
        acl_enabled=config.acl_enabled, admins=frozenset(config.admins),
        admin_groups=frozenset(config.admin_groups),
        readonly_admins=frozenset(config.readonly_admins),
        readonly_admin_groups=frozenset(config.readonly_admin_groups),
        blacklist_users=frozenset(config.blacklist_users),
        blacklist_groups=frozenset(config.blacklist_groups),
        read_blacklist_users=frozenset(config.read_blacklist_users),
        read_blacklist_groups=frozenset(config.read_blacklist_groups),
        volume_listall_allowed=config.volume_listall_allowed,
        groups=dict(config.user_groups))


@dataclass(frozen=True)
class Subject:
    """Who asks: the user and its groups."""

    user: str
    groups: frozenset[str]

    def among(self, users: frozenset[str], groups: frozenset[str],
              wildcard: bool = False) -> bool:
        """Whether the user, or one of its groups, is listed (``*`` lists everyone)."""
        return (self.user in users or bool(self.groups & groups)
                or (wildcard and WILDCARD in users))

    def matches(self, acl: acls.Acl) -> bool:
        """Whether an entry is about this subject (Ozone's ``checkAccessInAcl``)."""
        if acl.identity == acls.USER:
            return acl.name == self.user
        if acl.identity == acls.GROUP:
            return acl.name in self.groups
        return True   # WORLD and ANONYMOUS: everyone


@dataclass(frozen=True)
class Need:
    """One right a request needs on one object (``session``: CommitKey's open key)."""

    resource: Resource
    right: RightValue
    volume: str
    bucket: str = ""
    key: str = ""
    session: int = 0

    def on(self, resource: Resource, right: RightValue) -> Need:
        """The same names, another object type and right (a parent check)."""
        return Need(resource, right, self.volume, self.bucket, self.key, self.session)

    def denied(self, user: str) -> OMError:
        """PERMISSION_DENIED in Ozone's words, naming the user, the right and the object."""
        names = " ".join(f"{label}:{name}" for label, name in (
            ("Volume", self.volume), ("Bucket", self.bucket), ("Key", self.key)) if name)
        return OMError(om_pb2.PERMISSION_DENIED,
                       f"User {user} doesn't have {acls.Right.Name(self.right)} permission "
                       f"to access {om_pb2.OzoneObj.ResourceType.Name(self.resource)} {names}")


# ------------------------------------------------------------ what is needed ---

def _on(resource: Resource, right: RightValue) -> Callable[[Any], tuple[Need, ...]]:
    """Needs ``right`` on the volume, bucket or key the body names."""
    def needs(body: Any) -> tuple[Need, ...]:
        if resource == VOLUME:
            return (Need(resource, right, body.volume),)
        if resource == BUCKET:
            return (Need(resource, right, body.volume, body.bucket),)
        return (Need(resource, right, body.volume, body.bucket, body.key),)
    return needs


def _set_volume_property(body: om_pb2.SetVolumePropertyRequest) -> tuple[Need, ...]:
    needs = []
    if body.quota_in_bytes or body.quota_in_namespace:
        needs.append(Need(VOLUME, acls.WRITE, body.volume))
    if body.owner:
        needs.append(Need(VOLUME, acls.WRITE_ACL, body.volume))
    return tuple(needs)


def _commit_key(body: om_pb2.CommitKeyRequest) -> tuple[Need, ...]:
    return (Need(KEY, acls.WRITE, body.volume, body.bucket, body.key, body.client_session_id),)


def _commit_part(body: om_pb2.CommitMultiPartUploadRequest) -> tuple[Need, ...]:
    return (Need(KEY, acls.WRITE, body.volume, body.bucket, body.key, body.client_session_id),)


def _rename_key(body: om_pb2.RenameKeyRequest) -> tuple[Need, ...]:
    return (Need(KEY, acls.DELETE, body.volume, body.bucket, body.key),
            Need(KEY, acls.CREATE, body.volume, body.bucket, body.to_key))


def _acl_request(right: RightValue) -> Callable[[Any], tuple[Need, ...]]:
    def needs(body: Any) -> tuple[Need, ...]:
        obj = body.obj   # a volume, bucket or key, as the gate checked
        return (Need(obj.res_type, right, obj.volume, obj.bucket, obj.key),)
    return needs


NEEDS: dict[int, Callable[[Any], tuple[Need, ...]]] = {
    om_pb2.CreateVolume: _on(VOLUME, acls.CREATE),
    om_pb2.DeleteVolume: _on(VOLUME, acls.DELETE),
    om_pb2.SetVolumeProperty: _set_volume_property,
    om_pb2.InfoVolume: _on(VOLUME, acls.READ),
    om_pb2.ListVolume: lambda body: (Need(VOLUME, acls.LIST, ROOT),),
    om_pb2.CreateBucket: _on(BUCKET, acls.CREATE),
    om_pb2.DeleteBucket: _on(BUCKET, acls.DELETE),
    om_pb2.SetBucketProperty: _on(BUCKET, acls.WRITE),
    om_pb2.InfoBucket: _on(BUCKET, acls.READ),
    om_pb2.ListBuckets: _on(VOLUME, acls.LIST),
    om_pb2.CreateKey: _on(KEY, acls.CREATE),
    om_pb2.CommitKey: _commit_key,
    om_pb2.LookupKey: _on(KEY, acls.READ),
    om_pb2.DeleteKey: _on(KEY, acls.DELETE),
    om_pb2.RenameKey: _rename_key,
    om_pb2.ListKeys: _on(BUCKET, acls.LIST),
    om_pb2.CreateDirectory: _on(KEY, acls.CREATE),
    om_pb2.CreateFile: _on(KEY, acls.CREATE),
    om_pb2.LookupFile: _on(KEY, acls.READ),
    om_pb2.GetFileStatus: _on(KEY, acls.READ),
    om_pb2.ListStatus: _on(BUCKET, acls.LIST),
    # the leader's own step of a purge (clients' are refused at the intake)
    om_pb2.PurgeDirectories: lambda body: (),
    om_pb2.PurgeKeys: lambda body: (),
    om_pb2.DeleteOpenKeys: lambda body: (),
    om_pb2.InitiateMultiPartUpload: _on(KEY, acls.WRITE),
    om_pb2.CommitMultiPartUpload: _commit_part,
    om_pb2.CompleteMultiPartUpload: _on(KEY, acls.WRITE),
    om_pb2.AbortMultiPartUpload: _on(KEY, acls.WRITE),
    om_pb2.ListMultiPartUploadParts: _on(KEY, acls.READ),
    om_pb2.ListMultipartUploads: _on(BUCKET, acls.LIST),
    om_pb2.AbortExpiredMultiPartUploads: lambda body: (),
    om_pb2.CreateSnapshot: _on(BUCKET, acls.WRITE),
    om_pb2.DeleteSnapshot: _on(BUCKET, acls.WRITE),
    om_pb2.GetSnapshotInfo: _on(BUCKET, acls.READ),
    om_pb2.ListSnapshot: _on(BUCKET, acls.LIST),
    om_pb2.SnapshotDiff: _on(BUCKET, acls.READ),
    om_pb2.AddAcl: _acl_request(acls.WRITE_ACL),
    om_pb2.RemoveAcl: _acl_request(acls.WRITE_ACL),
    om_pb2.SetAcl: _acl_request(acls.WRITE_ACL),
    om_pb2.GetAcl: _acl_request(acls.READ_ACL),
    om_pb2.GetDelegationToken: lambda body: (),
    om_pb2.RenewDelegationToken: lambda body: (),
    om_pb2.CancelDelegationToken: lambda body: (),
    om_pb2.PrepareStatus: lambda body: (),
    om_pb2.FinalizeUpgradeProgress: lambda body: (),
    om_pb2.FlowStatus: lambda body: (),
}


# Requests about no object, that only an administrator may send: the user
# certificates (om/executor/security/user_certificates.py); prepare, cancel and finalize
# (om/executor/admin/upgrade.py: Ozone lets only OM administrators run them); the flow
# switch (om/executor/admin/flow_switch.py).
ADMIN_ONLY = frozenset({om_pb2.AddUserCertificate, om_pb2.RevokeUserCertificates,
                        om_pb2.ListUserCertificates, om_pb2.Prepare, om_pb2.CancelPrepare,
                        om_pb2.FinalizeUpgrade, om_pb2.SetFlows})


def needs_of(request: om_pb2.OMRequest) -> tuple[Need, ...]:
    """The rights ``request`` needs, in the order they are checked."""
    assert request.cmd_type not in ADMIN_ONLY, "an administrator's request needs no right"
    body = getattr(request, request.WhichOneof("body") or "")
    return NEEDS[request.cmd_type](body)


def groups_of(mapping: Mapping[str, tuple[str, ...]],
              request: om_pb2.OMRequest) -> tuple[str, ...]:
    """The groups of ``request.user``: the configured mapping's (its first is the primary
    group), then those of its client certificate (``OMRequest.groups``) not among them."""
    mapped = mapping.get(request.user, ())
    return merged_groups(mapped, request.groups) if request.groups else mapped


# ---------------------------------------------------------------- deciding ---

class _Rows:
    """The rows one Need is decided on, each read once (None: missing)."""

    def __init__(self, view: ReadView, need: Need) -> None:
        self._view = view
        self._need = need

    @cached_property
    def volume(self) -> om_pb2.VolumeInfo | None:
        return self._view.parsed(om_pb2.VOLUME, tables.volume_key(self._need.volume),
                                 om_pb2.VolumeInfo.FromString)

    @cached_property
    def bucket(self) -> om_pb2.BucketInfo | None:
        return self._view.parsed(om_pb2.BUCKET,
                                 tables.bucket_key(self._need.volume, self._need.bucket),
                                 om_pb2.BucketInfo.FromString)

    @cached_property
    def key(self) -> om_pb2.KeyInfo | None:
        """The committed key, or for a WRITE (CommitKey) the open key of its session."""
        need = self._need
        if need.right == acls.WRITE:
            raw = self._view.get(om_pb2.OPEN_KEY, tables.open_key_key(
                need.volume, need.bucket, need.key, need.session))
        else:
            raw = self._view.get(om_pb2.KEY, tables.key_key(need.volume, need.bucket, need.key))
        return None if raw is None else om_pb2.KeyInfo.FromString(raw)


def _grants(row: om_pb2.VolumeInfo | om_pb2.BucketInfo | om_pb2.KeyInfo | None,
            subject: Subject, right: RightValue) -> bool:
    """Ozone's ``checkAclRights``: some entry about the subject grants the right."""
    assert row is not None, "callers check that the row exists"
    return any(subject.matches(acl) and acl.grants(right)
               for acl in acls.from_protos(row.acls))


def _parent_right(right: RightValue, resource: Resource) -> RightValue:
    """Ozone's ``getParentNativeAcl``: what the bucket (of a key) or volume (of a bucket)
    must grant."""
    if right == acls.CREATE:
        return acls.WRITE
    if resource == KEY and right == acls.WRITE:
        return acls.WRITE
    return acls.READ


def _key_access(rows: _Rows, subject: Subject, need: Need) -> bool:
    """Ozone's ``KeyManagerImpl.checkAccess``: a missing key passes a READ (the handler
    says KEY_NOT_FOUND) or a WRITE (the open key is gone), else is KEY_NOT_FOUND."""
    if need.right == acls.CREATE:
        return True
    if rows.key is None:
        if need.right in (acls.READ, acls.WRITE):
            return True
        raise OMError(om_pb2.KEY_NOT_FOUND, f"Key not found, checkAccess failed. Key:/"
                                            f"{need.volume}/{need.bucket}/{need.key}")
    return _grants(rows.key, subject, need.right)


def _native(policy: AclPolicy, subject: Subject, rows: _Rows, need: Need,
            owner: str | None) -> bool:
    """Ozone's ``OzoneNativeAuthorizer.checkAccess`` for one object, right and owner."""
    right = need.right
    if subject.among(policy.blacklist_users, policy.blacklist_groups):
        return False
    if right in READS and subject.among(policy.read_blacklist_users,
                                        policy.read_blacklist_groups):
        return False
    if subject.among(policy.admins, policy.admin_groups, wildcard=True):
        return True
    if right in READS and subject.among(policy.readonly_admins, policy.readonly_admin_groups,
                                        wildcard=True):
        return True
    if right == acls.LIST and need.volume == ROOT:
        return policy.volume_listall_allowed
    owns = owner is not None and subject.user == owner
    if need.resource == VOLUME:
        return right != acls.CREATE and (owns or _grants(rows.volume, subject, right))
    if owns:
        return True
    parent = _parent_right(right, need.resource)
    if need.resource == BUCKET:
        return ((right == acls.CREATE or _grants(rows.bucket, subject, right))
                and _grants(rows.volume, subject, parent))
    return (_key_access(rows, subject, need) and _grants(rows.bucket, subject, parent)
            and _grants(rows.volume, subject, acls.READ))


def _check(view: ReadView, policy: AclPolicy, subject: Subject, need: Need) -> None:
    """Ozone's ``checkAllAcls`` for one need: raises PERMISSION_DENIED when refused."""
    rows = _Rows(view, need)
    if need.volume == ROOT or (need.resource == VOLUME and need.right == acls.CREATE):
        if not _native(policy, subject, rows, need, None):
            raise need.denied(subject.user)
        return
    if rows.volume is None:
        return   # the handler reports VOLUME_NOT_FOUND
    volume_owner = rows.volume.owner_name
    if need.resource == VOLUME or subject.user == volume_owner:
        if not _native(policy, subject, rows, need, volume_owner):
            raise need.denied(subject.user)
        return
    creates_bucket = need.resource == BUCKET and need.right == acls.CREATE
    if not creates_bucket and rows.bucket is None:
        return   # the handler reports BUCKET_NOT_FOUND
    parent = acls.WRITE if creates_bucket else acls.READ
    if not _native(policy, subject, rows, need.on(VOLUME, parent), volume_owner):
        raise need.on(VOLUME, parent).denied(subject.user)
    bucket_owner = None if creates_bucket or rows.bucket is None else rows.bucket.owner
    if not _native(policy, subject, rows, need, bucket_owner):
        raise need.denied(subject.user)


def authorize(request: om_pb2.OMRequest, view: ReadView, policy: AclPolicy) -> None:
    """Raises PERMISSION_DENIED when ``request.user`` may not run ``request``.

    Pure over ``view`` (applied state): it runs on the leader before the
    request takes its locks, as Ozone's ``preExecute`` checks do.
    """
    if not policy.acl_enabled:
        return
    subject = Subject(request.user, frozenset(groups_of(policy.groups, request)))
    if request.cmd_type in ADMIN_ONLY:
        _administrator(policy, subject, request.cmd_type)
        return
    for need in needs_of(request):
        _check(view, policy, subject, need)


def _administrator(policy: AclPolicy, subject: Subject, cmd: om_pb2.Type.ValueType) -> None:
    """PERMISSION_DENIED unless the subject is an administrator not on a deny list."""
    if (subject.among(policy.blacklist_users, policy.blacklist_groups)
            or not subject.among(policy.admins, policy.admin_groups, wildcard=True)):
        raise OMError(om_pb2.PERMISSION_DENIED,
                      f"User {subject.user} is not an OM administrator: only administrators "
                      f"(admins, admin_groups) may send {om_pb2.Type.Name(cmd)}")
