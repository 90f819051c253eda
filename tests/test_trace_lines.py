"""``LineFormat`` lines are the JSON objects docs/TRACES.md states, as ``json.dumps``
of the same record would write them, and a node's server_request lines parse so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from om.flows.template import SERVER_REQUEST_FIELDS
from om.observe.tracing import SCHEMA_VERSION, LineFormat, Tracer


def test_a_line_is_the_records_json() -> None:
    line = LineFormat("server_request", {"flow": 'le"ader', "node": "om1"}, SERVER_REQUEST_FIELDS)
    values = (1795800419204000000, "CommitKey", "KEY_NOT_FOUND", 1, 2, 3, 4, 5, 6, 7)
    record = json.loads(line.line(*values))
    assert record == {"v": SCHEMA_VERSION, "kind": "server_request", "flow": 'le"ader',
                      "node": "om1", **dict(zip([n for n, _ in SERVER_REQUEST_FIELDS], values,
                                                strict=True))}


def test_an_int_field_refuses_a_string() -> None:
    line = LineFormat("server_request", {"flow": "f", "node": "n"}, SERVER_REQUEST_FIELDS)
    with pytest.raises(TypeError):
        line.line("1", "CommitKey", "OK", 1, 2, 3, 4, 5, 6, 7)


def test_lines_reach_the_file_beside_dict_records(tmp_path: Path) -> None:
    tracer = Tracer(tmp_path / "t.jsonl", "leader")
    line = LineFormat("server_request", {"flow": tracer.flow, "node": "om1"},
                      SERVER_REQUEST_FIELDS)
    tracer.emit_line(line.line(5, "CreateKey", "OK", 0, 1, 2, 3, 4, 5, 9))
    tracer.emit("server_batch", {"t_ns": 6, "node": "om1", "batch_id": 9})
    tracer.close()
    records = [json.loads(text) for text in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in records] == ["server_request", "server_batch"]
    assert records[0]["flow"] == records[1]["flow"] == "leader"
    assert records[0]["batch_id"] == 9
