"""Client versions (om/protocol/client_version.py) and Ozone's validators for older
clients (om/gatekeeper/old_clients.py), through the request template in-process, in
every execution mode: an older client (unstamped = DEFAULT_VERSION, or any version
below CURRENT_VERSION) is refused every key-level request with Ozone's status and text,
and nothing is replicated or written; a current and a newer client are served. Through
a real node: tests/test_upgrade_cluster.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from om.client import requests as build
from om.consensus.local import LocalReplicator
from om.executor.fso.fs import FSO
from om.flows.leader_flow import LeaderFlow, leader_service
from om.flows.replicated_flow import ReplicatedFlow, replicated_flow_service
from om.flows.settings import LeaderConfig
from om.flows.template import RequestService
from om.gatekeeper import old_clients
from om.node.parts import MACHINE_SEAM
from om.observe.tracing import NullTracer
from om.protocol import acls, om_pb2
from om.protocol.client_version import CURRENT_VERSION, ClientVersion, is_older
from om.schema.read_view import ReadView
from om.statemachine.apply import ApplyResult, StateMachine
from om.statemachine.replicated_apply import MemoryRetryCache, ReplicatedStateMachine
from om.statemachine.store import Store

V, OBS_BUCKET, FSO_BUCKET = "vol", "obs", "fso"
FUTURE = 2**31          # a version this server does not know: a newer client's
OLDER = [0, int(ClientVersion.VERSION_HANDLES_UNKNOWN_DN_PORTS),
         int(ClientVersion.ERASURE_CODING_SUPPORT)]
EXECUTIONS = ["leader", "replicated", "switchable"]

# Ozone's texts, as its validators write them (BucketLayout.validateSupportedOperation,
# OzoneManagerRequestHandler.disallow*WithBucketLayout).
MODIFY = ("Client is attempting to modify a bucket which uses non-LEGACY bucket layout "
          "features. Please upgrade the client to a compatible version before performing "
          "this operation.")
LOOKUP_KEY = ("Key is present inside a bucket with bucket layout features, which the client "
              "can not understand. Please upgrade the client to a compatible version before "
              "trying to read the key info for vol/obs/k.")
LOOKUP_FILE = ("File is present inside a bucket with bucket layout features, which the client "
               "can not understand. Please upgrade the client to a compatible version before "
               "trying to read the key info for vol/fso/d/f.")
FILE_STATUS = ("Key is present in a bucket using bucket layout features which the client can "
               "not understand. Please upgrade the client before trying to read the key info "
               "for vol/fso/d/f.")
LIST_KEYS = ("The list of keys contains keys present inside bucket with bucket layout "
             "features, hence the client is not able to understand all the keys returned. "
             "Please upgrade the client to get the list of keys.")
LIST_STATUS = ("The list of keys is present in a bucket using bucket layout features, hence "
               "the client is not able to represent all the keys returned. Please upgrade the "
               "client to get the list of keys.")


def _fail() -> None:
    raise AssertionError("fail-stop in a test")


class Node:
    """A leader in-process in one execution mode, on a real store; ``log`` holds every
    entry it replicated and applied."""

    def __init__(self, path: Path, execution: str) -> None:
        config = LeaderConfig()
        self.store = Store(path)
        self.log: list[bytes] = []
        self.machine: StateMachine | ReplicatedStateMachine
        self.service: RequestService[LeaderFlow] | RequestService[ReplicatedFlow]
        if execution == "leader":
            self.machine = StateMachine(self.store)
        else:
            self.machine = ReplicatedStateMachine(self.store, config.limits,
                                                  MemoryRetryCache(600_000, 1000), 100, _fail)
        replicator = LocalReplicator("om1", "a:1", self.machine.applied_index, self._apply)
        if isinstance(self.machine, StateMachine):
            self.service = leader_service("om1", self.store, self.machine, replicator, config,
                                          NullTracer(), MACHINE_SEAM)
        elif execution == "switchable":
            self.service = leader_service("om1", self.machine.view, self.machine, replicator,
                                          config, NullTracer(), MACHINE_SEAM)
        else:
            self.service = replicated_flow_service("om1", self.machine, replicator, config,
                                                   NullTracer(), MACHINE_SEAM)
        self.calls = 0

    def _apply(self, position: int, entry: bytes) -> ApplyResult:
        self.log.append(entry)
        return self.machine.apply_entry(position, entry)

    async def call(self, request: om_pb2.OMRequest,
                   version: int = CURRENT_VERSION) -> om_pb2.OMResponse:
        self.calls += 1
        request.client_id, request.user, request.call_id = "client", "alice", self.calls
        request.client_version = version
        return await self.service.handle(request)

    async def ok(self, request: om_pb2.OMRequest,
                 version: int = CURRENT_VERSION) -> om_pb2.OMResponse:
        response = await self.call(request, version)
        assert response.status == om_pb2.OK, (om_pb2.Status.Name(response.status),
                                              response.message)
        return response

    def digests(self) -> dict[str, str]:
        if isinstance(self.machine, ReplicatedStateMachine):
            self.machine.quiesce()     # the double buffer flushed: the store is current
        return self.store.digests()

    async def close(self) -> None:
        await self.service.close()
        if isinstance(self.machine, ReplicatedStateMachine):
            self.machine.close()
        self.store.close()


@pytest.fixture(params=EXECUTIONS)
async def node(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Node]:
    """A node with an object-store bucket holding key ``k`` and a file-system bucket
    holding ``d/f``, written by a current client."""
    under_test = Node(tmp_path / "db", request.param)
    await under_test.service.start()
    await under_test.ok(build.create_volume(V))
    await under_test.ok(build.create_bucket(V, OBS_BUCKET))
    await under_test.ok(build.create_bucket(V, FSO_BUCKET, layout=FSO))
    for bucket, key in ((OBS_BUCKET, "k"), (FSO_BUCKET, "d/f")):
        opened = await under_test.ok(build.create_key(V, bucket, key, 5))
        await under_test.ok(build.commit_key(V, bucket, key,
                                             opened.create_key.client_session_id, 5))
    yield under_test
    await under_test.close()


def _key(bucket: str, key: str) -> om_pb2.OzoneObj:
    return build.acl_object(V, bucket, key)


ACL = acls.parse("user:bob:r").to_proto()

# Every pre-process validator's type, as a request in each bucket layout.
PRE_PROCESS: dict[str, Callable[[str], om_pb2.OMRequest]] = {
    "CreateKey": lambda b: build.create_key(V, b, "new", 5),
    "CommitKey": lambda b: build.commit_key(V, b, "new", 1, 5),
    "DeleteKey": lambda b: build.delete_key(V, b, "k"),
    "RenameKey": lambda b: build.rename_key(V, b, "k", "k2"),
    "CreateFile": lambda b: build.create_file(V, b, "d/g", 5),
    "CreateDirectory": lambda b: build.create_directory(V, b, "e"),
    "InitiateMultiPartUpload": lambda b: build.initiate_multipart_upload(V, b, "m"),
    "CommitMultiPartUpload": lambda b: build.commit_multipart_upload(V, b, "m", "1", 1, 1, 5),
    "CompleteMultiPartUpload": lambda b: build.complete_multipart_upload(V, b, "m", "1",
                                                                         [(1, "")]),
    "AbortMultiPartUpload": lambda b: build.abort_multipart_upload(V, b, "m", "1"),
    "AddAcl": lambda b: build.add_acl(_key(b, "k"), ACL),
    "RemoveAcl": lambda b: build.remove_acl(_key(b, "k"), ACL),
    "SetAcl": lambda b: build.set_acl(_key(b, "k"), [ACL]),
    "DeleteBucket": lambda b: build.delete_bucket(V, b),
}


def test_the_tables_name_exactly_the_types_of_ozones_validators() -> None:
    assert {om_pb2.Type.Name(t) for t in old_clients.PRE_PROCESS} == set(PRE_PROCESS)
    assert {om_pb2.Type.Name(t) for t in old_clients.POST_PROCESS} == {
        "LookupKey", "ListKeys", "LookupFile", "GetFileStatus", "ListStatus"}


def test_versions_are_ozones() -> None:
    assert [(v.name, int(v)) for v in ClientVersion] == [
        ("FUTURE_VERSION", -1), ("DEFAULT_VERSION", 0),
        ("VERSION_HANDLES_UNKNOWN_DN_PORTS", 1), ("ERASURE_CODING_SUPPORT", 2),
        ("BUCKET_LAYOUT_SUPPORT", 3)]
    assert CURRENT_VERSION == 3
    assert [is_older(v) for v in (0, 1, 2, 3, 4, FUTURE, 2**32 - 1)] == [
        True, True, True, False, False, False, False]


def test_the_client_library_stamps_its_version() -> None:
    assert build.create_key(V, OBS_BUCKET, "k").client_version == CURRENT_VERSION
    assert om_pb2.OMRequest().client_version == ClientVersion.DEFAULT_VERSION, \
        "an unstamped request reads as the oldest client's"


class NoReads:
    """A ReadView that fails on any read: a current client's request must not need one."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"the store was read ({name}) for a current client's request")


@pytest.mark.parametrize("name", sorted(PRE_PROCESS))
@pytest.mark.parametrize("version", [CURRENT_VERSION, FUTURE])
def test_a_current_or_newer_clients_write_costs_no_read(name: str, version: int) -> None:
    request = PRE_PROCESS[name](OBS_BUCKET)
    request.client_version = version
    view: ReadView = NoReads()   # type: ignore[assignment]
    assert old_clients.pre_process_refusal(request, view) is None


@pytest.mark.parametrize("name", sorted(PRE_PROCESS))
async def test_an_older_clients_key_write_is_refused_and_writes_nothing(
        node: Node, name: str) -> None:
    for bucket in (OBS_BUCKET, FSO_BUCKET):
        before, entries = node.digests(), len(node.log)
        for version in OLDER:
            refused = await node.call(PRE_PROCESS[name](bucket), version)
            assert (om_pb2.Status.Name(refused.status), refused.message) == (
                "NOT_SUPPORTED_OPERATION", MODIFY), (name, bucket, version)
        assert len(node.log) == entries, "nothing replicated"
        assert node.digests() == before, "nothing written"
        assert node.service.in_flight == 0


@pytest.mark.parametrize("name", sorted(PRE_PROCESS))
async def test_an_older_client_naming_a_missing_bucket_hears_so(node: Node, name: str) -> None:
    """Ozone's validator reads the bucket first: a missing one is its not-found status."""
    missing = await node.call(PRE_PROCESS[name]("nobucket"), 0)
    assert om_pb2.Status.Name(missing.status) == "BUCKET_NOT_FOUND", missing
    request = PRE_PROCESS[name]("nobucket")
    body = getattr(request, request.WhichOneof("body") or "")
    (body.obj if request.cmd_type in (om_pb2.AddAcl, om_pb2.RemoveAcl, om_pb2.SetAcl)
     else body).volume = "novol"
    assert om_pb2.Status.Name((await node.call(request, 0)).status) == "VOLUME_NOT_FOUND"


async def test_current_and_newer_clients_are_served(node: Node) -> None:
    for version in (CURRENT_VERSION, FUTURE, 2**32 - 1):
        key = f"k{version}"
        opened = await node.ok(build.create_key(V, OBS_BUCKET, key, 5), version)
        await node.ok(build.commit_key(V, OBS_BUCKET, key,
                                       opened.create_key.client_session_id, 5), version)
        await node.ok(build.add_acl(_key(OBS_BUCKET, key), ACL), version)
        found = await node.ok(build.lookup_key(V, OBS_BUCKET, key), version)
        assert found.lookup_key.key_info.key_name == key
        assert (await node.ok(build.list_keys(V, OBS_BUCKET), version)).list_keys.key_info
        await node.ok(build.rename_key(V, OBS_BUCKET, key, f"{key}-moved"), version)
        await node.ok(build.delete_key(V, OBS_BUCKET, f"{key}-moved"), version)
        await node.ok(build.create_directory(V, FSO_BUCKET, f"dir{version}"), version)
        await node.ok(build.list_status(V, FSO_BUCKET), version)
        await node.ok(build.get_file_status(V, FSO_BUCKET, "d/f"), version)
        await node.ok(build.lookup_file(V, FSO_BUCKET, "d/f"), version)


READS: dict[str, tuple[om_pb2.OMRequest, str]] = {
    "LookupKey": (build.lookup_key(V, OBS_BUCKET, "k"), LOOKUP_KEY),
    "ListKeys": (build.list_keys(V, OBS_BUCKET), LIST_KEYS),
    "LookupFile": (build.lookup_file(V, FSO_BUCKET, "d/f"), LOOKUP_FILE),
    "GetFileStatus": (build.get_file_status(V, FSO_BUCKET, "d/f"), FILE_STATUS),
    "ListStatus": (build.list_status(V, FSO_BUCKET), LIST_STATUS),
}


@pytest.mark.parametrize("name", sorted(READS))
@pytest.mark.parametrize("local_read", [False, True])
async def test_an_older_client_is_refused_keys_it_cannot_understand(
        node: Node, name: str, local_read: bool) -> None:
    template, text = READS[name]
    for version in OLDER:
        request = om_pb2.OMRequest()
        request.CopyFrom(template)
        request.local_read = local_read
        refused = await node.call(request, version)
        assert (om_pb2.Status.Name(refused.status), refused.message) == (
            "NOT_SUPPORTED_OPERATION", text)
        assert refused.WhichOneof("body") is None, "the keys are not handed out"


async def test_an_older_client_hears_of_missing_keys_and_empty_lists(node: Node) -> None:
    """Ozone's post-process validators look only at a successful answer with keys."""
    await node.ok(build.create_bucket(V, "empty", layout=FSO))
    for request, status in (
            (build.lookup_key(V, OBS_BUCKET, "nokey"), "KEY_NOT_FOUND"),
            (build.lookup_file(V, FSO_BUCKET, "d/nofile"), "FILE_NOT_FOUND"),
            (build.list_keys(V, "empty"), "OK"),
            (build.list_status(V, "empty"), "OK")):
        answer = await node.call(request, 0)
        assert om_pb2.Status.Name(answer.status) == status, (request, answer)


async def test_an_older_clients_volume_and_bucket_requests_run_as_ozones(node: Node) -> None:
    """No old-client validator in Ozone but DeleteBucket's (above): served."""
    await node.ok(build.create_volume("old"), 0)
    await node.ok(build.create_bucket("old", "bkt"), 0)
    await node.ok(build.info_bucket("old", "bkt"), 0)
    assert len((await node.ok(build.list_buckets("old"), 0)).list_buckets.bucket_info) == 1
    await node.ok(build.add_acl(build.acl_object("old", "bkt"), ACL), 0)
    await node.ok(build.add_acl(build.acl_object("old"), ACL), 0)
    await node.ok(build.get_acl(_key(OBS_BUCKET, "k")), 0)
    await node.ok(build.info_volume("old"), 0)
    refused = await node.call(build.delete_bucket("old", "bkt"), 0)
    assert om_pb2.Status.Name(refused.status) == "NOT_SUPPORTED_OPERATION"
    await node.ok(build.delete_bucket("old", "bkt"))

