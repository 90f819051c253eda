"""The blocking client: plain sockets, one request at a time per connection.

It uses only the standard ``socket`` and ``ssl`` modules, so gevent's monkey
patching (as locust applies it) makes it cooperative. A TLS setting that cannot
work with the OM is raised at once as ``OMTlsError`` (``om.client.diagnosis``).
It keeps one connection per address it reached (with shards, one per shard of the
node it talks to: a client writing to buckets of several shards does not reconnect
between them); a failed attempt drops that address's connection only.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from om.client import diagnosis
from om.client import requests as build
from om.client.errors import OMClientError, OMConnectionError, error_for
from om.client.identity import DEFAULT_ADDRESS, ClientIdentity, Tls, split_address
from om.client.retry_policy import Attempts, RetryPolicy
from om.protocol import om_pb2
from om.protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, WireError, encode_frame


@dataclass
class _Link:
    """One connection: its socket, its frame decoder, whether the OM sent bytes on it
    (then TLS matched: a close before any is a misconfiguration to diagnose)."""

    socket: socket.socket
    decoder: FrameDecoder = field(default_factory=lambda: FrameDecoder(DEFAULT_MAX_FRAME_BYTES))
    answered: bool = False


class OMClient(ClientIdentity):
    """A blocking OM client that retries with the same call id."""

    def __init__(self, addresses: Sequence[str] = (DEFAULT_ADDRESS,), user: str | None = None,
                 policy: RetryPolicy | None = None, client_id: str | None = None,
                 read_mode: str = "linearizable", tls: Tls | None = None,
                 token: om_pb2.TokenProto | None = None) -> None:
        super().__init__(addresses, user, policy, client_id, read_mode, tls, token)
        self._links: dict[str, _Link] = {}    # by address
        self.last_retries = 0
        self.last_node = ""

    def __enter__(self) -> OMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes every connection."""
        links, self._links = self._links, {}
        for link in links.values():
            link.socket.close()

    def _drop(self, address: str) -> None:
        link = self._links.pop(address, None)
        if link is not None:
            link.socket.close()

    def call(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        """Sends ``request`` (retrying as needed); raises the typed error unless OK."""
        response = self.call_raw(request)
        if response.status != om_pb2.OK:
            raise error_for(response)
        return response

    def call_raw(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        """Sends ``request`` and returns the final answer, whatever its status.

        The request gets this client's id and version, the user and, unless already set, a
        new call id; every retry reuses them.
        """
        self.stamp(request)
        frame = encode_frame(request.SerializeToString())
        attempts = Attempts(self.route(request), self._current, self.policy, time.monotonic())
        while True:
            address = attempts.address
            try:
                response = self._round_trip(address, frame, request.call_id)
            except (OSError, WireError) as error:
                self._drop(address)
                problem = self._misconfigured(address, error)
                if problem is not None:
                    self.last_retries = attempts.retries
                    raise problem from None
                delay = attempts.after_connection_error(time.monotonic())
                if delay is None:
                    self.last_retries = attempts.retries
                    raise OMConnectionError(
                        f"no OM answered call {request.call_id} within "
                        f"{self.policy.deadline_s} s (tried {self.addresses})") from None
            else:
                route = self.rerouted(request, response, address)
                if route is not None:
                    attempts.reroute(route)
                    continue
                delay = attempts.after_response(response, time.monotonic())
                if delay is None:
                    self.last_retries = attempts.retries
                    self.last_node = address
                    self._current = attempts.current % len(self.addresses)
                    return response
            self._drop(address)
            time.sleep(delay)

    def _misconfigured(self, address: str, error: OSError | WireError,
                       ) -> diagnosis.OMTlsError | None:
        """The one-line error when ``error`` shows TLS settings that cannot work with the
        OM at ``address`` (a plain client probes the port, within a second)."""
        if isinstance(error, diagnosis.ClosedBeforeReply):
            if self.tls is None:
                probe_s = min(diagnosis.PROBE_TIMEOUT_S, self.policy.attempt_timeout_s)
                return diagnosis.plain_to_tls(address) if diagnosis.speaks_tls(
                    address, probe_s) else None
            return diagnosis.closed_before_reply(address, self.tls, error.cause)
        if isinstance(error, ssl.SSLError) and self.tls is not None:
            return diagnosis.handshake_failure(error, address, self.tls)
        return None

    def _link(self, address: str) -> _Link:
        link = self._links.get(address)
        if link is None:
            host, port = split_address(address)
            plain = socket.create_connection((host, port), timeout=self.policy.attempt_timeout_s)
            plain.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            wrapped = plain if self.ssl_context is None else \
                self.ssl_context.wrap_socket(plain, server_hostname=host)
            link = self._links[address] = _Link(wrapped)
        return link

    def _round_trip(self, address: str, frame: bytes, call_id: int) -> om_pb2.OMResponse:
        link = self._link(address)
        try:
            link.socket.sendall(frame)
            while True:
                data = link.socket.recv(65536)
                if not data:
                    raise ConnectionResetError("the OM closed the connection")
                link.answered = True
                for payload in link.decoder.feed(data):
                    response = om_pb2.OMResponse.FromString(payload)
                    if response.call_id in (call_id, 0):
                        return response
        except (ConnectionResetError, BrokenPipeError) as error:
            if link.answered:
                raise
            raise diagnosis.ClosedBeforeReply(error) from error

    # -- convenience calls, mirroring `ozone sh` --------------------------------

    def create_volume(self, volume: str, quota_in_bytes: int = 0, quota_in_namespace: int = 0,
                      owner: str = "") -> om_pb2.VolumeInfo:
        request = build.create_volume(volume, quota_in_bytes, quota_in_namespace, owner)
        return self.call(request).create_volume.volume_info

    def info_volume(self, volume: str) -> om_pb2.VolumeInfo:
        return self.call(build.info_volume(volume)).info_volume.volume_info

    def set_volume_quota(self, volume: str, quota_in_bytes: int = 0,
                         quota_in_namespace: int = 0) -> om_pb2.VolumeInfo:
        request = build.set_volume_property(volume, quota_in_bytes, quota_in_namespace)
        return self.call(request).set_volume_property.volume_info

    def delete_volume(self, volume: str) -> None:
        self.call(build.delete_volume(volume))

    def list_volumes(self, prefix: str = "", start_key: str = "",
                     max_keys: int = 0) -> om_pb2.ListVolumeResponse:
        return self.call(build.list_volumes(prefix, start_key, max_keys)).list_volume

    def create_bucket(self, volume: str, bucket: str, quota_in_bytes: int = 0,
                      quota_in_namespace: int = 0, layout: str = "") -> om_pb2.BucketInfo:
        """A bucket; ``layout`` "FILE_SYSTEM_OPTIMIZED" for directories as rows."""
        request = build.create_bucket(volume, bucket, quota_in_bytes, quota_in_namespace,
                                      layout=layout)
        return self.call(request).create_bucket.bucket_info

    def info_bucket(self, volume: str, bucket: str) -> om_pb2.BucketInfo:
        return self.call(build.info_bucket(volume, bucket)).info_bucket.bucket_info

    def set_bucket_quota(self, volume: str, bucket: str, quota_in_bytes: int = 0,
                         quota_in_namespace: int = 0) -> om_pb2.BucketInfo:
        request = build.set_bucket_property(volume, bucket, quota_in_bytes, quota_in_namespace)
        return self.call(request).set_bucket_property.bucket_info

    def delete_bucket(self, volume: str, bucket: str) -> None:
        self.call(build.delete_bucket(volume, bucket))

    def list_buckets(self, volume: str, prefix: str = "", start_key: str = "",
                     max_keys: int = 0) -> om_pb2.ListBucketsResponse:
        return self.call(build.list_buckets(volume, prefix, start_key, max_keys)).list_buckets

    def create_key(self, volume: str, bucket: str, key: str,
                   data_size: int = 0) -> om_pb2.CreateKeyResponse:
        return self.call(build.create_key(volume, bucket, key, data_size)).create_key

    def commit_key(self, volume: str, bucket: str, key: str, session_id: int,
                   data_size: int) -> om_pb2.KeyInfo:
        request = build.commit_key(volume, bucket, key, session_id, data_size)
        return self.call(request).commit_key.key_info

    def put_key(self, volume: str, bucket: str, key: str, data_size: int) -> om_pb2.KeyInfo:
        """CreateKey then CommitKey: records a key's metadata (no data is written)."""
        opened = self.create_key(volume, bucket, key, data_size)
        return self.commit_key(volume, bucket, key, opened.client_session_id, data_size)

    def lookup_key(self, volume: str, bucket: str, key: str) -> om_pb2.KeyInfo:
        return self.call(build.lookup_key(volume, bucket, key)).lookup_key.key_info

    def delete_key(self, volume: str, bucket: str, key: str,
                   recursive: bool = False) -> om_pb2.KeyInfo:
        """A key (a file, or in an FSO bucket a directory: ``recursive`` for a non-empty
        one)."""
        return self.call(build.delete_key(volume, bucket, key, recursive)).delete_key.key_info

    # -- multipart upload (OBJECT_STORE buckets) ------------------------------------------

    def initiate_multipart_upload(self, volume: str, bucket: str, key: str,
                                  replication_factor: int = 0) -> str:
        """A new upload of ``key``: its upload id."""
        request = build.initiate_multipart_upload(volume, bucket, key, replication_factor)
        return self.call(request).initiate_multipart_upload.upload_id

    def put_part(self, volume: str, bucket: str, key: str, upload_id: str, part_number: int,
                 data_size: int) -> str:
        """CreateKey of a part, then CommitMultiPartUpload: the part's name."""
        opened = self.call(build.create_key(volume, bucket, key, data_size,
                                            upload_id=upload_id)).create_key
        request = build.commit_multipart_upload(volume, bucket, key, upload_id, part_number,
                                                opened.client_session_id, data_size)
        return self.call(request).commit_multipart_upload.part_name

    def complete_multipart_upload(self, volume: str, bucket: str, key: str, upload_id: str,
                                  parts: list[tuple[int, str]]) -> om_pb2.KeyInfo:
        request = build.complete_multipart_upload(volume, bucket, key, upload_id, parts)
        return self.call(request).complete_multipart_upload.key_info

    def abort_multipart_upload(self, volume: str, bucket: str, key: str,
                               upload_id: str) -> None:
        self.call(build.abort_multipart_upload(volume, bucket, key, upload_id))

    def list_multipart_upload_parts(self, volume: str, bucket: str, key: str, upload_id: str,
                                    part_number_marker: int = 0, max_parts: int = 0
                                    ) -> om_pb2.ListMultiPartUploadPartsResponse:
        request = build.list_multipart_upload_parts(volume, bucket, key, upload_id,
                                                    part_number_marker, max_parts)
        return self.call(request).list_multipart_upload_parts

    def list_multipart_uploads(self, volume: str, bucket: str, prefix: str = "",
                               key_marker: str = "", upload_id_marker: str = "",
                               max_uploads: int = 0) -> om_pb2.ListMultipartUploadsResponse:
        request = build.list_multipart_uploads(volume, bucket, prefix, key_marker,
                                               upload_id_marker, max_uploads)
        return self.call(request).list_multipart_uploads

    # -- OM snapshots (om sh snapshot) ---------------------------------------------------

    def create_snapshot(self, volume: str, bucket: str, name: str = "") -> om_pb2.SnapshotInfo:
        """A snapshot of the bucket (empty name: the leader names it)."""
        return self.call(build.create_snapshot(volume, bucket, name)).create_snapshot.snapshot_info

    def delete_snapshot(self, volume: str, bucket: str, name: str) -> None:
        self.call(build.delete_snapshot(volume, bucket, name))

    def snapshot_info(self, volume: str, bucket: str, name: str) -> om_pb2.SnapshotInfo:
        request = build.get_snapshot_info(volume, bucket, name)
        return self.call(request).get_snapshot_info.snapshot_info

    def list_snapshots(self, volume: str, bucket: str, prefix: str = "", start_after: str = "",
                       max_results: int = 0) -> om_pb2.ListSnapshotResponse:
        request = build.list_snapshots(volume, bucket, prefix, start_after, max_results)
        return self.call(request).list_snapshot

    def snapshot_diff(self, volume: str, bucket: str, from_snapshot: str,
                      to_snapshot: str = "", page_size: int = 0,
                      pages_max: int = 10_000) -> list[om_pb2.DiffEntry]:
        """Every entry of the diff, page after page (at most ``pages_max`` pages)."""
        entries: list[om_pb2.DiffEntry] = []
        token = ""
        for _ in range(pages_max):
            request = build.snapshot_diff(volume, bucket, from_snapshot, to_snapshot, token,
                                          page_size)
            page = self.call(request).snapshot_diff
            entries.extend(page.entries)
            token = page.next_token
            if not token:
                return entries
        raise OMClientError(f"the diff did not end within {pages_max} pages")

    # -- file-system buckets (FILE_SYSTEM_OPTIMIZED) --------------------------------------

    def create_directory(self, volume: str, bucket: str, path: str) -> None:
        """The directory and its missing parents; DIRECTORY_ALREADY_EXISTS if it exists."""
        self.call(build.create_directory(volume, bucket, path))

    def create_file(self, volume: str, bucket: str, path: str, data_size: int = 0,
                    recursive: bool = False,
                    overwrite: bool = False) -> om_pb2.CreateFileResponse:
        """An open file: commit it with ``commit_key`` and the session id."""
        request = build.create_file(volume, bucket, path, data_size, recursive, overwrite)
        return self.call(request).create_file

    def lookup_file(self, volume: str, bucket: str, path: str) -> om_pb2.KeyInfo:
        return self.call(build.lookup_file(volume, bucket, path)).lookup_file.key_info

    def get_file_status(self, volume: str, bucket: str, path: str) -> om_pb2.FileStatus:
        return self.call(build.get_file_status(volume, bucket, path)).get_file_status.status

    def list_status(self, volume: str, bucket: str, path: str = "", recursive: bool = False,
                    start_key: str = "", num_entries: int = 0) -> om_pb2.ListStatusResponse:
        request = build.list_status(volume, bucket, path, recursive, start_key, num_entries)
        return self.call(request).list_status

    def rename_key(self, volume: str, bucket: str, key: str, to_key: str) -> om_pb2.KeyInfo:
        return self.call(build.rename_key(volume, bucket, key, to_key)).rename_key.key_info

    def list_keys(self, volume: str, bucket: str, prefix: str = "", start_key: str = "",
                  max_keys: int = 0) -> om_pb2.ListKeysResponse:
        request = build.list_keys(volume, bucket, prefix, start_key, max_keys)
        return self.call(request).list_keys

    def service_list(self) -> om_pb2.ServiceListResponse:
        return self.call(build.service_list()).service_list

    def add_acl(self, obj: om_pb2.OzoneObj, acl: om_pb2.OzoneAcl) -> bool:
        """AddAcl; False when the object had those rights already (nothing changed)."""
        return self.call(build.add_acl(obj, acl)).add_acl.response

    def remove_acl(self, obj: om_pb2.OzoneObj, acl: om_pb2.OzoneAcl) -> bool:
        """RemoveAcl; False when the object had none of those rights."""
        return self.call(build.remove_acl(obj, acl)).remove_acl.response

    def set_acl(self, obj: om_pb2.OzoneObj, acls: list[om_pb2.OzoneAcl]) -> bool:
        """SetAcl: replaces every entry of the object's ACL."""
        return self.call(build.set_acl(obj, acls)).set_acl.response

    def get_acl(self, obj: om_pb2.OzoneObj) -> list[om_pb2.OzoneAcl]:
        """The object's ACL entries, in their stored order."""
        return list(self.call(build.get_acl(obj)).get_acl.acls)

    def get_delegation_token(self, renewer: str = "") -> om_pb2.GetDelegationTokenResponse:
        """A delegation token for this client's user (renewer: the owner unless given);
        its service names the addresses it came from."""
        issued = self.call(build.get_delegation_token(renewer)).get_delegation_token
        issued.token.service = ",".join(self.addresses)
        return issued

    def renew_delegation_token(self, token: om_pb2.TokenProto) -> int:
        """Renews ``token`` (this client's user must be its renewer); its new expiry, ms."""
        response = self.call(build.renew_delegation_token(token))
        return response.renew_delegation_token.new_expiry_time

    def cancel_delegation_token(self, token: om_pb2.TokenProto) -> None:
        """Cancels ``token`` (this client's user must be its owner or renewer)."""
        self.call(build.cancel_delegation_token(token))

    def prepare(self, drain_timeout_s: int = 0) -> om_pb2.PrepareResponse:
        """Prepares the cluster for an upgrade (administrators): writes stop until
        ``cancel_prepare``; the answer names the index it was prepared at."""
        return self.call(build.prepare(drain_timeout_s)).prepare

    def prepare_status(self, local: bool = False) -> om_pb2.PrepareStatusResponse:
        """Whether the cluster is prepared (``local``: as the node asked has applied)."""
        request = build.prepare_status()
        request.local_read = local
        return self.call(request).prepare_status

    def cancel_prepare(self) -> om_pb2.CancelPrepareResponse:
        """Lifts a prepare (administrators); was_prepared is False when there was none."""
        return self.call(build.cancel_prepare()).cancel_prepare

    def finalize_upgrade(self, upgrade_client_id: str = "") -> om_pb2.FinalizeUpgradeResponse:
        """Turns on every layout feature of the software (administrators)."""
        return self.call(build.finalize_upgrade(upgrade_client_id)).finalize_upgrade

    def finalize_upgrade_progress(self, local: bool = False
                                  ) -> om_pb2.FinalizeUpgradeProgressResponse:
        """The layout versions and each feature's state (``local``: the node asked)."""
        request = build.finalize_upgrade_progress()
        request.local_read = local
        return self.call(request).finalize_upgrade_progress
