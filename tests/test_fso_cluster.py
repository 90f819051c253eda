"""File-system buckets on real 3-node clusters (127.0.0.1), in every execution flow.

The concurrency checks of ``tests/test_fso_concurrency.py`` again, now through
real clients racing over TCP against a replicated cluster (the old flow runs the
same handlers in apply; the leader flow plans and takes the object-id locks):
after each scenario every node runs the auditor (``om admin audit``: no orphan,
no cycle, no name twice, unique ids, usage equal to the tree) and must report
nothing, and at the end every replica holds the same bytes in every table.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from om.cli import main
from om.client import OMClient
from om.client import requests as build
from om.cluster import lifecycle as om_cluster
from om.protocol import om_pb2
from tests import cluster_harness as harness

pytestmark = pytest.mark.integration   # real 3-node clusters

V, B = "vol", "fsb"
CLIENTS = 16


@pytest.fixture(scope="module", params=["leader", "replicated"])
def cluster(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[om_cluster.Cluster]:
    execution, workers = harness.FLOWS[request.param]
    started = harness.start(tmp_path_factory.mktemp(f"fso-{request.param}"),
                            execution=execution, workers=workers)
    try:
        with harness.client(started) as om:
            om.create_volume(V)
            om.create_bucket(V, B, quota_in_bytes=10**9, layout="FILE_SYSTEM_OPTIMIZED")
        yield started
        harness.wait_converged(started)
        digests = harness.digests_after_stop(started)
        assert len({json.dumps(d, sort_keys=True) for d in digests.values()}) == 1, digests
    finally:
        om_cluster.down(started)


class Racers:
    """``CLIENTS`` connections (one per thread) sending requests at once: the answers'
    statuses, in the order the requests were given."""

    def __init__(self, cluster: om_cluster.Cluster) -> None:
        self.cluster = cluster
        self.local = threading.local()
        self.opened: list[OMClient] = []
        self.lock = threading.Lock()

    def _client(self) -> OMClient:
        om: OMClient | None = getattr(self.local, "om", None)
        if om is None:
            om = harness.client(self.cluster)
            self.local.om = om
            with self.lock:
                self.opened.append(om)
        return om

    def status(self, request: om_pb2.OMRequest) -> str:
        return om_pb2.Status.Name(self._client().call_raw(request).status)

    def race(self, *requests: om_pb2.OMRequest) -> list[str]:
        with ThreadPoolExecutor(CLIENTS) as pool:
            return list(pool.map(self.status, requests, timeout=60))

    def close(self) -> None:
        for om in self.opened:
            om.close()


@pytest.fixture
def racers(cluster: om_cluster.Cluster,
           capsys: pytest.CaptureFixture[str]) -> Iterator[Racers]:
    """The racing clients; afterwards every node's auditor must find the tree whole."""
    under_test = Racers(cluster)
    yield under_test
    under_test.close()
    harness.wait_converged(cluster)
    capsys.readouterr()
    status = main(["admin", "audit", "--dir", str(cluster.directory), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert status == 0, report
    assert report["cluster"] == [], report
    assert all(n["violations_total"] == 0 for n in report["nodes"]), report["nodes"]


def _put(racers: Racers, path: str, size: int = 10) -> None:
    om = racers._client()
    opened = om.create_file(V, B, path, size, recursive=True)
    om.commit_key(V, B, path, opened.client_session_id, size)


def _names(racers: Racers, path: str) -> list[str]:
    """The full paths of everything under ``path`` (FileStatus.path)."""
    listed = racers._client().list_status(V, B, path, recursive=True)
    return sorted(s.path for s in listed.statuses)


def test_64_way_mkdir_p_on_overlapping_paths(racers: Racers) -> None:
    statuses = racers.race(*(build.create_directory(V, B, f"top/mid{n % 4}/leaf{n % 8}")
                             for n in range(64)))
    assert set(statuses) <= {"OK", "DIRECTORY_ALREADY_EXISTS"}, statuses
    assert statuses.count("OK") == 8, "one creator for each distinct leaf"
    assert len(_names(racers, "top")) == 4 + 8


@pytest.mark.parametrize("create_first", [True, False])
def test_create_file_racing_rm_r(racers: Racers, create_first: bool) -> None:
    root = f"race{int(create_first)}"
    _put(racers, f"{root}/e/old")
    create = build.create_file(V, B, f"{root}/e/new", 5, recursive=True)
    remove = build.delete_key(V, B, root, recursive=True)
    statuses = racers.race(*((create, remove) if create_first else (remove, create)))
    assert statuses[1 if create_first else 0] == "OK", "the delete always succeeds"


def test_crossing_file_renames_do_not_deadlock(racers: Racers) -> None:
    _put(racers, "fx/a")
    _put(racers, "fy/b")
    statuses = racers.race(build.rename_key(V, B, "fx/a", "fy/a2"),
                           build.rename_key(V, B, "fy/b", "fx/b2"))
    assert statuses == ["OK", "OK"]
    assert _names(racers, "fx") == ["fx/b2"]
    assert _names(racers, "fy") == ["fy/a2"]


def test_crossing_directory_renames_make_no_cycle(racers: Racers) -> None:
    for name in ("da", "db"):
        _put(racers, f"{name}/file")
    statuses = racers.race(build.rename_key(V, B, "da", "db/x"),
                           build.rename_key(V, B, "db", "da/y"))
    assert statuses.count("OK") == 1, statuses
    assert set(statuses) - {"OK"} <= {"INVALID_REQUEST", "DIRECTORY_NOT_FOUND",
                                      "KEY_NOT_FOUND"}, statuses


def test_a_create_under_a_directory_being_renamed(racers: Racers) -> None:
    racers._client().create_directory(V, B, "proj/src")
    statuses = racers.race(build.rename_key(V, B, "proj", "renamed"),
                           build.create_file(V, B, "proj/src/main.py", 3))
    assert statuses[0] == "OK"
    assert statuses[1] in ("OK", "DIRECTORY_NOT_FOUND"), statuses


def test_delete_of_a_non_empty_directory_racing_a_create(racers: Racers) -> None:
    _put(racers, "full/kept")
    statuses = racers.race(build.create_file(V, B, "full/f", 1),
                           build.delete_key(V, B, "full"))
    assert statuses == ["OK", "DIRECTORY_NOT_EMPTY"], statuses
    racers._client().create_directory(V, B, "empty")
    statuses = racers.race(build.create_file(V, B, "empty/f", 1),
                           build.delete_key(V, B, "empty"))
    # an open file is not a child yet (as in Ozone): either order may win
    assert statuses in (["OK", "OK"], ["DIRECTORY_NOT_FOUND", "OK"]), statuses


def _storm() -> list[om_pb2.OMRequest]:
    """Creates, renames and recursive deletes crossing each other's paths (fresh requests:
    a request keeps its call id, and a retried call id is answered from the reply cache)."""
    names = [f"s{n}" for n in range(4)]
    requests: list[om_pb2.OMRequest] = []
    for a in names:
        for b in names:
            requests += [build.create_directory(V, B, f"{a}/{b}"),
                         build.create_file(V, B, f"{a}/{b}/f", 7, recursive=True),
                         build.rename_key(V, B, f"{a}/{b}", f"{b}/{a}-moved"),
                         build.delete_key(V, B, f"{b}/{a}", recursive=True)]
    return requests


def test_a_mixed_storm_keeps_the_tree_and_the_quota(racers: Racers) -> None:
    for _ in range(2):
        statuses = racers.race(*_storm())
        assert "INTERNAL_ERROR" not in statuses, statuses


def test_a_directory_rename_moves_its_subtree(racers: Racers) -> None:
    for n in range(20):
        _put(racers, f"big/d{n % 4}/f{n}")
    before = _names(racers, "big")
    racers._client().create_directory(V, B, "moved")   # a rename needs its new parent
    racers._client().rename_key(V, B, "big", "moved/big")
    assert _names(racers, "moved/big") == [f"moved/{name}" for name in before]
    assert racers.status(build.get_file_status(V, B, "big")) == "FILE_NOT_FOUND"
