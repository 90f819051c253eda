"""The suite's tiers and worker groups (``tests/tiers.py``), on a small suite of its own
run by pytest in a subprocess with the same plugin, on real pytest-xdist workers."""

from __future__ import annotations

import re
import subprocess
import textwrap
from pathlib import Path

from tests.processes import inner_pytest

RUN_BOUND_S = 120

CONFTEST = '''
import os
from pathlib import Path

import pytest

pytest_plugins = ["tests.tiers"]


def _made(name):
    with (Path(__file__).parent / f"{name}.made").open("a") as made:
        made.write(f"{os.getpid()}\\n")


@pytest.fixture(scope="session")
def smoke_bench():
    _made("smoke_bench")


@pytest.fixture(scope="session")
def own_ports():
    _made("own_ports")
'''

SHARED_MODULE = '''
import pytest

from conftest import _made


@pytest.fixture(scope="module")
def cluster():
    _made("cluster")


@pytest.mark.parametrize("n", range(6))
def test_reads_the_cluster(cluster, own_ports, n):
    pass


@pytest.mark.parametrize("n", range(6))
def test_needs_nothing(n):
    pass
'''

BENCH_USERS = '''
import pytest


@pytest.mark.parametrize("n", range(4))
def test_reads_the_bench(smoke_bench, own_ports, n):
    pass
'''

SPARK_USERS = '''
from pathlib import Path

import pytest

from tests.tiers import examples


@pytest.mark.parametrize("n", range(4))
def test_reads_the_bench_too(smoke_bench, n):
    pass


@pytest.mark.slow
def test_a_long_run():
    pass


@pytest.mark.spark
def test_a_spark_job_of_its_own():
    pass


@examples(fast=3, slow=30)
def test_a_property(examples):
    with (Path(__file__).parent / "examples.run").open("a") as ran:
        ran.write(f"{examples}\\n")
'''


def _suite(directory: Path, extra_conftest: str = "") -> Path:
    (directory / "conftest.py").write_text(CONFTEST + extra_conftest)
    (directory / "test_shared_module.py").write_text(SHARED_MODULE)
    (directory / "test_bench_users.py").write_text(BENCH_USERS)
    (directory / "test_spark_users.py").write_text(SPARK_USERS)
    (directory / "pytest.ini").write_text(textwrap.dedent('''
        [pytest]
        asyncio_default_fixture_loop_scope = function
        markers =
            slow: a long run
            integration: starts real server processes
            spark: runs a Spark job
    '''))
    return directory


def _pytest(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return inner_pytest(directory, *args, timeout_s=RUN_BOUND_S)


def _made(directory: Path, name: str) -> list[str]:
    return (directory / f"{name}.made").read_text().split()


def test_the_slow_tier_runs_only_when_named(tmp_path: Path) -> None:
    suite = _suite(tmp_path)
    done = _pytest(suite, "-n", "0")
    assert "22 passed, 2 deselected" in done.stdout, done.stdout
    assert _examples_run(suite) == [3]      # a property's share of its examples
    done = _pytest(suite, "-n", "0", "-m", "slow")
    assert "2 passed, 22 deselected" in done.stdout, done.stdout
    assert _examples_run(suite) == [30]     # and all of them
    done = _pytest(suite, "-n", "0", "test_spark_users.py")
    assert "8 passed" in done.stdout, done.stdout
    assert "deselected" not in done.stdout
    assert sorted(_examples_run(suite)) == [3, 30]


def _examples_run(directory: Path) -> list[int]:
    """The example counts the suite's property test ran with since the last call."""
    ran = directory / "examples.run"
    counts = [int(n) for n in ran.read_text().split()]
    ran.unlink()
    return counts


def test_costly_fixtures_are_made_once_across_workers(tmp_path: Path) -> None:
    suite = _suite(tmp_path)
    done = _pytest(suite, "-n", "3", "--dist", "loadgroup")
    assert done.returncode == 0, done.stdout
    # the controller does not count deselections; a warning under load (a worker's
    # slow start) is reported, not a failure of the tiers
    assert re.search(r" 22 passed(, \d+ warnings?)? in ", done.stdout), done.stdout
    assert len(_made(suite, "smoke_bench")) == 1     # two modules, one worker
    assert len(_made(suite, "cluster")) == 1          # one module's fixture, one worker
    # A per-worker session fixture is made by each worker that needs it: so the tests
    # were spread, and the check above means something.
    workers = set(_made(suite, "own_ports"))
    assert len(workers) >= 2, done.stdout


def test_an_unsorted_session_fixture_stops_the_collection(tmp_path: Path) -> None:
    suite = _suite(tmp_path, extra_conftest='''

@pytest.fixture(scope="session")
def a_new_cluster():
    pass
''')
    (suite / "test_new.py").write_text("def test_it(a_new_cluster):\n    pass\n")
    done = _pytest(suite, "-n", "0")
    assert done.returncode != 0
    assert "session fixtures ['a_new_cluster']: add them to ONE_WORKER_FIXTURES or " \
           "PER_WORKER_FIXTURES" in done.stdout + done.stderr


def test_the_fast_tier_starts_no_jvm_nor_bench(tmp_path: Path) -> None:
    """Tests that use the Spark session or the smoke bench, or run a Spark job, are
    ``integration`` whatever their module says: the fast tier leaves them out."""
    suite = _suite(tmp_path)
    done = _pytest(suite, "-n", "0", "-m", "not integration")
    assert "13 passed, 11 deselected" in done.stdout, done.stdout
    assert not (suite / "smoke_bench.made").exists()
