"""Shared fixtures. Async tests run on uvloop, as the server does."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
import uvloop
from hypothesis import HealthCheck, settings

from om.cluster import lifecycle as om_cluster
from tests.processes import REPO, BenchRun, om_command, worker_free_ports

# pytest keeps each test module's assertion-rewritten bytecode in __pycache__ (ignored
# by git), unless writing bytecode is off (PYTHONDONTWRITEBYTECODE, set on some
# machines): then every worker of every run rewrites all test modules again, 10 of the
# 16 s of CPU a worker's collection took. The modules collected after this one are cached.
sys.dont_write_bytecode = False

# A hung test fails within its timeout, in the event loop too (tests/timeouts.py); the
# slow tier and the tests that share a worker (tests/tiers.py); a failed cluster test
# shows its nodes' log tails (tests/node_logs.py).
pytest_plugins = ["tests.timeouts", "tests.tiers", "tests.node_logs"]

# Tests check behaviour, not time: hypothesis's per-example deadline (200 ms) and its
# too-slow health check measure how busy the machine is, and the suite's workers share
# two cores with whatever else runs. A test that means a deadline sets its own.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")


def pytest_asyncio_loop_factories(
        config: pytest.Config, item: pytest.Item) -> dict[str, Callable[[], object]]:
    return {"uvloop": uvloop.new_event_loop}


@pytest.fixture(scope="session", autouse=True)
def own_cluster_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The clusters the suite starts are remembered in a cache of its own
    ($XDG_CACHE_HOME, which every ``om`` subprocess inherits), never in the user's:
    a tool discovering a certificate then meets only this session's clusters."""
    cache = tmp_path_factory.mktemp("xdg-cache")
    before, file_before = os.environ.get("XDG_CACHE_HOME"), om_cluster.LAST_CLUSTER_FILE
    os.environ["XDG_CACHE_HOME"] = str(cache)
    om_cluster.LAST_CLUSTER_FILE = cache / "om" / "last-cluster"
    yield
    om_cluster.LAST_CLUSTER_FILE = file_before
    if before is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = before


@pytest.fixture(scope="session", autouse=True)
def own_ports() -> Iterator[None]:
    """Under pytest-xdist each worker draws its clusters' ports from a share of its own
    ($OM_FREE_PORTS, which every ``om`` subprocess inherits): workers start clusters at
    the same moments, and two picking one base would fail both. Single ports
    (``free_port``) come from the kernel's ephemeral range, above every share."""
    worker, workers = os.environ.get("PYTEST_XDIST_WORKER"), \
        os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if worker is None or workers is None:
        yield
        return
    low, high = worker_free_ports(int(worker.removeprefix("gw")), int(workers))
    before = os.environ.get(om_cluster.FREE_PORTS_ENV)
    os.environ[om_cluster.FREE_PORTS_ENV] = f"{low}-{high}"
    assert om_cluster.free_port_range() == (low, high)
    yield
    if before is None:
        os.environ.pop(om_cluster.FREE_PORTS_ENV, None)
    else:
        os.environ[om_cluster.FREE_PORTS_ENV] = before


@pytest.fixture(scope="session")
def smoke_bench(tmp_path_factory: pytest.TempPathFactory) -> BenchRun:
    """One real ``om bench --profile smoke`` (every flow, etcd included where it is
    installed), run once per test session: the bench's own test checks its files, the
    Spark tests analyse them (each cluster start costs seconds on two cores)."""
    out = tmp_path_factory.mktemp("smoke") / "bench"
    done = subprocess.run(om_command("bench", "--profile", "smoke", "--out", str(out)),
                          capture_output=True, text=True, cwd=REPO, timeout=300, check=False)
    if done.returncode != 0:
        pytest.fail(f"om bench --profile smoke failed: {done.stdout[-2000:]}"
                    f"{done.stderr[-3000:]}")
    return BenchRun(out, done.stdout)
