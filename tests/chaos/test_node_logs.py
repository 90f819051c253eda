"""The chaos run's reading of the nodes' logs (om/chaos/node_logs.py)."""

from __future__ import annotations

from pathlib import Path

from om.chaos import node_logs

OM1 = """\
2026-12-01 22:03:19,559 WARNING om.consensus.pysyncobj.leadership: node om1 leads term 16
Traceback (most recent call last):
  File "/x/om/gatekeeper/lock_table.py", line 109, in statistics
    waiters=sum(len(e.waiters) for e in self._entries.values()),
RuntimeError: dictionary changed size during iteration
2026-12-01 22:24:22,028 ERROR om.integrity.continuous: ALERT no majority in keyTable
2026-12-01 22:25:22,028 ERROR om.integrity.continuous: ALERT no majority in keyTable
"""


def test_tracebacks_and_error_lines_are_counted_per_node(tmp_path: Path) -> None:
    (tmp_path / "om1.log").write_text(OM1)
    (tmp_path / "om2.log").write_text("2026-12-01 22:03:19,559 WARNING x: fine\n")
    found = node_logs.summarize(tmp_path)
    assert list(found) == ["om1"], "a log with nothing wrong is left out"
    assert found["om1"]["tracebacks"] == 1
    assert found["om1"]["error"] == 2
    assert found["om1"]["messages"] == {
        "ERROR om.integrity.continuous: ALERT no majority in keyTable": 2,
        "traceback: RuntimeError: dictionary changed size during iteration": 1}


def test_distinct_messages_are_bounded(tmp_path: Path) -> None:
    lines = [f"2026-12-01 22:00:00,000 CRITICAL x: problem {n}\n" for n in range(100)]
    (tmp_path / "om3.log").write_text("".join(lines))
    found = node_logs.summarize(tmp_path)["om3"]
    assert found["critical"] == 100
    assert len(found["messages"]) == node_logs.SAMPLES_MAX
