"""A failed test that ran OM nodes shows their last log lines in its report.

The suite's cluster tests start real processes whose logs live under the test's
``tmp_path`` (``<cluster>/omN.log``), which a CI machine throws away with the run: a
test that failed there only once (a catch-up test whose client met no OM for 30 s)
left nothing to read but the client's last error. This plugin (loaded by
``tests/conftest.py``) adds each node log's tail to the report of a failed phase, as
pytest adds captured output, so the failure says what the nodes were doing.
"""

from __future__ import annotations

import re
from collections.abc import Generator
from pathlib import Path

import pluggy
import pytest

NODE_LOG = re.compile(r"om\d+\.log")
TAIL_LINES = 40
LOGS_MAX = 6     # a test's own clusters: a few nodes each, never a directory's worth


def node_logs(directory: Path) -> list[Path]:
    """The node logs under ``directory``, at most LOGS_MAX of them, in name order."""
    found = (path for path in directory.rglob("om*.log") if NODE_LOG.fullmatch(path.name))
    return sorted(found)[:LOGS_MAX]


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of ``path`` (a line saying why when it cannot be read)."""
    try:
        text = path.read_text(errors="replace")
    except OSError as error:
        return f"(unreadable: {error})"
    return "\n".join(text.splitlines()[-lines:])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None],
                              ) -> Generator[None, pluggy.Result[pytest.TestReport], None]:
    outcome = yield
    report = outcome.get_result()
    directory = getattr(item, "funcargs", {}).get("tmp_path")
    if not report.failed or not isinstance(directory, Path):
        return
    for log in node_logs(directory):
        report.sections.append(
            (f"node log {log.relative_to(directory)} (last {TAIL_LINES} lines)", tail(log)))
