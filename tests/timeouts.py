"""A hung test fails within its timeout, also when it hangs inside the uvloop event loop.

pytest-timeout's signal method raises from a SIGALRM handler. Under uvloop that handler
runs inside the loop's own signal callback, which logs the exception and goes back to
waiting: a test awaiting something that never comes hung the whole run far past its
timeout (issue 34). The thread method exits the process at once: no failure line, no
teardown, and the nodes the test started keep running. This plugin (loaded by
``tests/conftest.py``) takes over pytest-timeout's timer through its
``pytest_timeout_set_timer`` hook, in two stages:

1. At the timeout, SIGALRM. Inside a task (the test's coroutine running, or blocked
   in a call the signal interrupts) or outside any event loop, pytest-timeout's own
   handler raises there, as its signal method does. Inside the loop between tasks
   (waiting for an event), every task of the loop is cancelled with pytest-timeout's
   message: the test fails with it and its fixtures stop what they started.
2. ``timeout_grace_s`` seconds later, if the test still runs (the signal blocked, a
   cancellation swallowed, a teardown stuck, a loop spinning in one callback): as
   pytest-timeout's thread method, every thread's stack goes to stderr and the process
   ends with status 1, but first every process the test started is killed. Under
   pytest-xdist that fails the test as a crashed worker, and a new worker runs the
   rest.

A test (or ``--timeout-method thread``) that asks for the thread method gets
pytest-timeout's own; so does one running outside the main thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

import psutil
import pytest
import pytest_timeout

GRACE_INI = "timeout_grace_s"
GRACE_S_DEFAULT = "30"   # a cluster's teardown stops three nodes: seconds, not minutes
_CANCEL = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(GRACE_INI, "seconds a timed-out test gets to fail and tear down before "
                  "its process is ended (tests/timeouts.py)", default=GRACE_S_DEFAULT)


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    """Arms both stages; None leaves the thread method to pytest-timeout."""
    if settings.method != "signal" or threading.current_thread() is not threading.main_thread():
        return None
    grace_s = float(item.config.getini(GRACE_INI))
    assert settings.timeout > 0
    assert grace_s > 0

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        __tracebackhide__ = True
        _fail_the_test(item, settings)

    last_resort = threading.Timer(settings.timeout + grace_s, _end_the_process,
                                  (item, settings, grace_s))
    last_resort.name = f"timeout last resort {item.nodeid}"
    last_resort.daemon = True

    def cancel() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        last_resort.cancel()

    item.stash[_CANCEL] = cancel
    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, settings.timeout)
    last_resort.start()
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> bool | None:
    cancel = item.stash.get(_CANCEL, None)
    if cancel is None:
        return None   # pytest-timeout's own timer, or none was set (a skip in setup)
    del item.stash[_CANCEL]
    cancel()
    return True


def _fail_the_test(item: pytest.Item, settings: Any) -> None:
    """Stage 1, in the main thread: raise where the test runs, or cancel the loop's
    tasks when the loop is between them (an exception raised there is only logged)."""
    __tracebackhide__ = True
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is None or asyncio.current_task(loop) is not None:
        pytest_timeout.timeout_sigalrm(item, settings)   # raises Failed
        return
    if not settings.disable_debugger_detection and pytest_timeout.is_debugging():
        return
    terminal = item.config.get_terminal_writer()
    terminal.sep("+", title="Timeout: cancelling the event loop's tasks")
    pytest_timeout.dump_stacks(terminal)
    message = pytest_timeout.PYTEST_FAILURE_MESSAGE % settings.timeout
    for task in asyncio.all_tasks(loop):
        task.cancel(message)


def _end_the_process(item: pytest.Item, settings: Any, grace_s: float) -> None:
    """Stage 2, on the timer's thread: kill what the test started (nothing else would:
    ``os._exit`` runs no teardown), write what the test printed and every thread's
    stack to the process's own stderr (a pytest-xdist worker's is the run's), exit 1."""
    if not settings.disable_debugger_detection and pytest_timeout.is_debugging():
        return
    children = psutil.Process().children(recursive=True)
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    psutil.wait_procs(children, timeout=10)
    out = err = ""
    capture = item.config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.suspend_global_capture(in_=True)
        out, err = capture.read_global_capture()
    stream = sys.__stderr__
    assert stream is not None
    stream.write(f"\n+++ Timeout: {item.nodeid} still ran {grace_s} s after its "
                 f"{settings.timeout} s timeout; killed {len(children)} processes it "
                 f"started; its output and every thread's stack follow, then this process "
                 f"ends +++\n{out}{err}")
    stream.flush()
    faulthandler.dump_traceback(stream, all_threads=True)
    stream.flush()
    os._exit(1)
