"""Ozone's request validators for older clients (``ValidationCondition.OLDER_CLIENT_REQUESTS``).

A request whose ``client_version`` is below ``CURRENT_VERSION``
(om/protocol/client_version.py; 0, unstamped, included) comes from a client older
than this server. Ozone lets such a client (older than BUCKET_LAYOUT_SUPPORT) touch
keys only in LEGACY buckets, the one layout it understands. om has no LEGACY buckets
(only OBJECT_STORE and FILE_SYSTEM_OPTIMIZED), so an older client is refused every
key-level request below, in any bucket, with Ozone's status (NOT_SUPPORTED_OPERATION)
and Ozone's text. A newer client (a number above CURRENT_VERSION, Ozone's
FUTURE_VERSION) is served as a current one, as in Ozone.

Ozone's validators of bucket layout (class: validator), and the om type each is:

pre-process
  OMKeyCreateRequest: blockCreateKeyWithBucketLayoutFromOldClient  CreateKey (a part's too)
  OMKeyCommitRequest: blockCommitKeyWithBucketLayoutFromOldClient  CommitKey
  OMKeyDeleteRequest: blockDeleteKeyWithBucketLayoutFromOldClient  DeleteKey
  OMKeyRenameRequest: blockRenameKeyWithBucketLayoutFromOldClient  RenameKey
  OMFileCreateRequest: blockCreateFileWithBucketLayoutFromOldClient  CreateFile
  OMDirectoryCreateRequest: blockCreateDirectoryWithBucketLayoutFromOldClient
                                                                   CreateDirectory
  S3InitiateMultipartUploadRequest: blockInitiateMPUWithBucketLayoutFromOldClient
                                                                   InitiateMultiPartUpload
  S3MultipartUploadCommitPartRequest: blockMPUCommitWithBucketLayoutFromOldClient
                                                                   CommitMultiPartUpload
  S3MultipartUploadCompleteRequest: blockMPUCompleteWithBucketLayoutFromOldClient
                                                                   CompleteMultiPartUpload
  S3MultipartUploadAbortRequest: blockMPUAbortWithBucketLayoutFromOldClient
                                                                   AbortMultiPartUpload
  OMKeyAddAclRequest: blockAddAclWithBucketLayoutFromOldClient     AddAcl of a KEY
  OMKeyRemoveAclRequest: blockRemoveAclWithBucketLayoutFromOldClient  RemoveAcl of a KEY
  OMKeySetAclRequest: blockSetAclWithBucketLayoutFromOldClient     SetAcl of a KEY
  OMBucketDeleteRequest: blockBucketDeleteWithBucketLayoutFromOldClient  DeleteBucket
  OMAllocateBlockRequest, OMKeysDeleteRequest, OMKeysRenameRequest: -- (om has no
    AllocateBlock, DeleteKeys, RenameKeys)
  OMBucketCreateRequest: setDefaultBucketLayoutForOlderClients: -- (see below)
post-process (OzoneManagerRequestHandler)
  disallowLookupKeyWithBucketLayout                                LookupKey
  disallowListKeysWithBucketLayout                                 ListKeys
  disallowLookupFileWithBucketLayout                               LookupFile
  disallowGetFileStatusWithBucketLayout                            GetFileStatus
  disallowListStatusResponseWithBucketLayout                       ListStatus
  disallowListTrashWithBucketLayout: -- (om has no ListTrash)

**Pre-process** (before the request runs; Ozone: ``RequestValidations.validateRequest``
on the leader, before Ratis): the bucket the request names is read
(``ValidationContext.getBucketLayout``): a missing one is Ozone's VOLUME_NOT_FOUND or
BUCKET_NOT_FOUND, an existing one NOT_SUPPORTED_OPERATION
(``BucketLayout.validateSupportedOperation``). It needs state, so it is not among the
stateless field checks (om/gatekeeper/validation.py): the request template
(om/flows/template.py, step 6) runs it on the leader against what its flow's readers
see, before the write is admitted, so it holds in every execution mode and nothing is
written, replicated or cached for a refused request. Ozone registers the ACL
validators by type, so there they also meet volume and bucket ACL requests, which its
``ObjectParser`` then fails as INVALID_PATH_IN_ACL_REQUEST; here they apply to KEY
objects only, and volume and bucket ACLs of older clients run as any client's.

**Post-process** (after a read ran; Ozone: ``validateResponse``): a successful answer
that carries a key (or a non-empty list of them) is replaced by NOT_SUPPORTED_OPERATION
and Ozone's text; a failed one (KEY_NOT_FOUND, ...) and an empty list pass unchanged.
Ozone reads the listed keys' bucket layouts; every om bucket is non-LEGACY, so a key
answered is in such a bucket and no read is needed.

Volume and bucket requests have no such validators in Ozone (InfoBucket, ListBuckets,
volumes: served), except DeleteBucket, above. Ozone's CreateBucket validator gives an
older client's new bucket the LEGACY layout; om has none, so the bucket gets the
default layout (OBJECT_STORE), whose keys that client is then refused. Ozone's
validators for erasure-coded keys never fire here: om stores no EC keys.

Only requests from older clients reach any of this: a current client's costs one
integer comparison and no store read.
"""

from __future__ import annotations

from collections.abc import Callable

from om.executor.errors import OMError
from om.executor.fso.fs import LAYOUTS
from om.executor.registry import error_response
from om.executor.rows import read_bucket
from om.protocol import om_pb2
from om.protocol.client_version import is_older
from om.schema.read_view import ReadView

# Ozone's BucketLayout.validateSupportedOperation.
MODIFY_REFUSED = ("Client is attempting to modify a bucket which uses non-LEGACY bucket layout "
                  "features. Please upgrade the client to a compatible version before "
                  "performing this operation.")
_LIST_KEYS_REFUSED = (
    "The list of keys contains keys present inside bucket with bucket layout features, "
    "hence the client is not able to understand all the keys returned. Please upgrade the "
    "client to get the list of keys.")
_LIST_STATUS_REFUSED = (
    "The list of keys is present in a bucket using bucket layout features, hence the client "
    "is not able to represent all the keys returned. Please upgrade the client to get the "
    "list of keys.")
_LOOKUP_KEY_REFUSED = (
    "Key is present inside a bucket with bucket layout features, which the client can not "
    "understand. Please upgrade the client to a compatible version before trying to read "
    "the key info for {}.")
_LOOKUP_FILE_REFUSED = (
    "File is present inside a bucket with bucket layout features, which the client can not "
    "understand. Please upgrade the client to a compatible version before trying to read "
    "the key info for {}.")
_FILE_STATUS_REFUSED = (
    "Key is present in a bucket using bucket layout features which the client can not "
    "understand. Please upgrade the client before trying to read the key info for {}.")

BucketOf = Callable[[om_pb2.OMRequest], "tuple[str, str] | None"]


def _body_bucket(field: str) -> BucketOf:
    def bucket_of(request: om_pb2.OMRequest) -> tuple[str, str] | None:
        body = getattr(request, field)
        return body.volume, body.bucket
    return bucket_of


def _acl_bucket(field: str) -> BucketOf:
    def bucket_of(request: om_pb2.OMRequest) -> tuple[str, str] | None:
        obj = getattr(request, field).obj
        if obj.res_type != om_pb2.OzoneObj.KEY:
            return None
        return obj.volume, obj.bucket
    return bucket_of


# The pre-process validators: the type, and the bucket a request of it names.
PRE_PROCESS: dict[om_pb2.Type.ValueType, BucketOf] = {
    om_pb2.CreateKey: _body_bucket("create_key"),
    om_pb2.CommitKey: _body_bucket("commit_key"),
    om_pb2.DeleteKey: _body_bucket("delete_key"),
    om_pb2.RenameKey: _body_bucket("rename_key"),
    om_pb2.CreateFile: _body_bucket("create_file"),
    om_pb2.CreateDirectory: _body_bucket("create_directory"),
    om_pb2.InitiateMultiPartUpload: _body_bucket("initiate_multipart_upload"),
    om_pb2.CommitMultiPartUpload: _body_bucket("commit_multipart_upload"),
    om_pb2.CompleteMultiPartUpload: _body_bucket("complete_multipart_upload"),
    om_pb2.AbortMultiPartUpload: _body_bucket("abort_multipart_upload"),
    om_pb2.AddAcl: _acl_bucket("add_acl"),
    om_pb2.RemoveAcl: _acl_bucket("remove_acl"),
    om_pb2.SetAcl: _acl_bucket("set_acl"),
    om_pb2.DeleteBucket: _body_bucket("delete_bucket"),
}

Refuses = Callable[[om_pb2.OMRequest, om_pb2.OMResponse], "str | None"]


def _one_key(field: str, text: str) -> Refuses:
    def refuses(request: om_pb2.OMRequest, response: om_pb2.OMResponse) -> str | None:
        if response.WhichOneof("body") != field:   # Ozone: !resp.hasLookupKeyResponse(), ...
            return None
        body = getattr(request, field)
        return text.format(f"{body.volume}/{body.bucket}/{body.key}")
    return refuses


def _listed(field: str, entries: str, text: str) -> Refuses:
    def refuses(request: om_pb2.OMRequest, response: om_pb2.OMResponse) -> str | None:
        if response.WhichOneof("body") != field or not getattr(getattr(response, field), entries):
            return None
        return text
    return refuses


# The post-process validators: the type, and the refusal's text for an answer of it.
POST_PROCESS: dict[om_pb2.Type.ValueType, Refuses] = {
    om_pb2.LookupKey: _one_key("lookup_key", _LOOKUP_KEY_REFUSED),
    om_pb2.LookupFile: _one_key("lookup_file", _LOOKUP_FILE_REFUSED),
    om_pb2.GetFileStatus: _one_key("get_file_status", _FILE_STATUS_REFUSED),
    om_pb2.ListKeys: _listed("list_keys", "key_info", _LIST_KEYS_REFUSED),
    om_pb2.ListStatus: _listed("list_status", "statuses", _LIST_STATUS_REFUSED),
}
assert not PRE_PROCESS.keys() & POST_PROCESS.keys()


def pre_process_refusal(request: om_pb2.OMRequest, view: ReadView) -> OMError | None:
    """The refusal of an older client's request before it runs (the bucket it names
    missing, or not LEGACY: every om bucket), or None: a current or newer client's,
    a type with no validator, a volume or bucket ACL."""
    if not is_older(request.client_version):
        return None
    bucket_of = PRE_PROCESS.get(request.cmd_type)
    named = None if bucket_of is None else bucket_of(request)
    if named is None:
        return None
    try:
        bucket = read_bucket(view, *named)
    except OMError as missing:
        return missing
    assert bucket.layout in LAYOUTS.values(), "om has no LEGACY layout"
    return OMError(om_pb2.NOT_SUPPORTED_OPERATION, MODIFY_REFUSED)


def post_process(request: om_pb2.OMRequest, response: om_pb2.OMResponse) -> om_pb2.OMResponse:
    """``response``, or NOT_SUPPORTED_OPERATION in its place when it hands an older client
    keys of a bucket with a layout it cannot understand (every om bucket's)."""
    if not is_older(request.client_version):
        return response
    refuses = POST_PROCESS.get(request.cmd_type)
    text = None if refuses is None else refuses(request, response)
    if text is None:
        return response
    assert response.status == om_pb2.OK, "only a successful answer carries a body"
    return error_response(request, om_pb2.NOT_SUPPORTED_OPERATION, text)
