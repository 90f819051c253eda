"""A hung test fails within its timeout (``tests/timeouts.py``): tests that hang on
purpose run in a pytest of their own, in a subprocess bounded in time, on the suite's
uvloop event loop and with its timeout plugin."""

from __future__ import annotations

import subprocess
import textwrap
import time
from pathlib import Path

import psutil

from tests.processes import inner_pytest

RUN_BOUND_S = 120   # no run below may take longer, hung or not

HUNG_IN_THE_LOOP = '''
import asyncio
import threading
from pathlib import Path

import pytest


@pytest.fixture
def resource():
    yield
    (Path(__file__).parent / "torn-down").write_text("yes")


async def test_deadlocks_in_the_event_loop(resource):
    first, second = asyncio.Lock(), asyncio.Lock()

    async def take(a, b):
        async with a:
            await asyncio.sleep(0.05)
            async with b:
                pass

    await asyncio.gather(take(first, second), take(second, first))


async def test_blocks_the_loop_in_a_call():
    threading.Event().wait()


def test_hangs_outside_any_loop():
    threading.Event().wait()


def test_runs_after_them():
    pass
'''

HUNG_BEYOND_THE_ALARM = '''
import signal
import subprocess
import time
from pathlib import Path


def test_ignores_the_alarm_and_leaves_a_process():
    child = subprocess.Popen(["sleep", "600"], start_new_session=True)
    (Path(__file__).parent / "child.pid").write_text(str(child.pid))
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
    time.sleep(600)


def test_runs_beside_it():
    pass
'''


def _run(directory: Path, test_file: str, timeout_s: float, grace_s: float,
         workers: int) -> tuple[subprocess.CompletedProcess[str], float]:
    """Runs pytest on ``test_file`` in ``directory`` (the suite's loop factory and
    timeout plugin); returns what it did and its wall time."""
    (directory / "test_hung.py").write_text(test_file)
    (directory / "conftest.py").write_text(textwrap.dedent('''
        from tests.conftest import pytest_asyncio_loop_factories  # the suite's uvloop
        pytest_plugins = ["tests.timeouts"]
    '''))
    (directory / "pytest.ini").write_text(textwrap.dedent(f'''
        [pytest]
        asyncio_mode = auto
        asyncio_default_fixture_loop_scope = function
        timeout = {timeout_s}
        timeout_grace_s = {grace_s}
    '''))
    started = time.monotonic()
    done = inner_pytest(directory, "-n", str(workers), timeout_s=RUN_BOUND_S)
    return done, time.monotonic() - started


def test_a_test_hung_in_the_event_loop_fails_at_its_timeout_and_tears_down(
        tmp_path: Path) -> None:
    done, wall_s = _run(tmp_path, HUNG_IN_THE_LOOP, timeout_s=2, grace_s=60, workers=0)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "3 failed, 1 passed" in out, out
    # Each failed by the first stage, not the last resort 60 s later.
    assert wall_s < 30, out
    assert out.count("Timeout (>2.0s) from pytest-timeout.") >= 3, out
    assert "FAILED test_hung.py::test_deadlocks_in_the_event_loop" in out
    assert "CancelledError" in out
    assert (tmp_path / "torn-down").read_text() == "yes"


def test_a_test_that_escapes_the_alarm_is_ended_with_what_it_started(
        tmp_path: Path) -> None:
    done, wall_s = _run(tmp_path, HUNG_BEYOND_THE_ALARM, timeout_s=1, grace_s=1,
                        workers=1)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert wall_s < 60, out
    assert ("+++ Timeout: test_hung.py::test_ignores_the_alarm_and_leaves_a_process "
            "still ran 1.0 s after its 1.0 s timeout; killed 1 processes") in done.stderr
    assert "in test_ignores_the_alarm_and_leaves_a_process" in done.stderr   # its stack
    assert "1 failed, 1 passed" in out, out   # the worker crashed; the run went on
    pid = int((tmp_path / "child.pid").read_text())
    assert not _running(pid), f"the hung test's child {pid} outlived it"


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
