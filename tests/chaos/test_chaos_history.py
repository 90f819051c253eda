"""The history model: validation rules and the JSON Lines format."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from om.chaos.history import F, History, HistoryError, Op, Outcome

from .chaos_builders import Builder, simulate


def _put(**changes: object) -> Op:
    base = Op(
        process=1,
        op_id=7,
        f=F.PUT,
        key="v/b/k",
        value=42,
        invoke_ns=100,
        complete_ns=250,
        outcome=Outcome.OK,
        node="om1",
        retries=1,
        extra={"call_id": 9},
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def test_stable_line_format() -> None:
    assert _put().to_json() == (
        '{"complete_ns":250,"extra":{"call_id":9},"f":"put","invoke_ns":100,"key":"v/b/k",'
        '"kind":"chaos_op","node":"om1","op_id":7,"outcome":"ok","process":1,"retries":1,'
        '"v":1,"value":42}'
    )


def test_op_roundtrips_through_json() -> None:
    op = _put(outcome=Outcome.INFO, complete_ns=None)
    assert Op.from_json(op.to_json()) == op
    assert op.end_ns == math.inf
    assert op.describe() == "p1#7 put v/b/k=42 info [100, inf)"


def test_extra_is_read_only() -> None:
    op = _put()
    with pytest.raises(TypeError):
        op.extra["call_id"] = 10  # type: ignore[index]


@given(st.randoms(use_true_random=False))
def test_simulated_history_roundtrips_through_jsonl(rng: random.Random) -> None:
    history = simulate(rng, processes=3, ops_per_process=5, keys=2).history
    assert History.from_jsonl(history.to_jsonl()) == history


def test_reader_skips_blank_lines_and_ignores_unknown_fields() -> None:
    line = _put().to_json().replace('"v":1', '"v":1,"future_field":true')
    assert History.from_lines(["", line, "   "]).ops == (_put(),)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "line 1: not JSON"),
        ("[1]", "JSON object"),
        ('{"v":2,"kind":"chaos_op"}', "not a v1"),
        (_put().to_json().replace('"op_id":7,', ""), "missing field 'op_id'"),
        (_put().to_json().replace('"op_id":7', '"op_id":"7"'), "must be int"),
        (_put().to_json().replace('"op_id":7', '"op_id":true'), "must be int"),
        (_put().to_json().replace('"f":"put"', '"f":"cas"'), "f='cas'"),
        (_put().to_json().replace('"outcome":"ok"', '"outcome":"maybe"'), "outcome='maybe'"),
        (_put().to_json().replace('{"call_id":9}', "[]"), "extra must be a JSON object"),
        (_put().to_json().replace('{"call_id":9}', '{"a":[1]}'), "JSON scalar"),
    ],
)
def test_reader_rejects_malformed_lines(line: str, message: str) -> None:
    with pytest.raises(HistoryError, match=message):
        History.from_lines([line])


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"process": -1}, "process must be"),
        ({"retries": -1}, "retries must be"),
        ({"key": ""}, "key must be"),
        ({"complete_ns": None}, "needs complete_ns"),
        ({"complete_ns": 99}, "complete_ns must be an int >= invoke_ns"),
        ({"value": None}, "needs the value"),
        ({"f": F.GET, "outcome": Outcome.INFO, "complete_ns": None}, "only an ok get"),
        ({"f": F.DELETE}, "carries no value"),
        ({"f": F.ADD, "value": 0}, "positive delta"),
        ({"extra": {"x": math.nan}}, "finite"),
    ],
)
def test_op_rejects_inconsistent_fields(changes: dict[str, object], message: str) -> None:
    with pytest.raises(HistoryError, match=message):
        _put(**changes)


def test_history_rejects_duplicate_op_ids() -> None:
    with pytest.raises(HistoryError, match="duplicate op_id"):
        History((_put(), _put(value=43)))


def test_history_rejects_a_put_value_written_twice() -> None:
    with pytest.raises(HistoryError, match="written twice"):
        History((_put(), _put(op_id=8, process=2)))


def test_history_rejects_overlapping_ops_of_one_process() -> None:
    with pytest.raises(HistoryError, match="two ops at once"):
        History((_put(), _put(op_id=8, value=43, invoke_ns=200, complete_ns=300)))


def test_process_may_move_on_after_an_info_op() -> None:
    abandoned = _put(outcome=Outcome.INFO, complete_ns=None)
    history = History((abandoned, _put(op_id=8, value=43, invoke_ns=200, complete_ns=300)))
    assert len(history) == 2
    assert [op.op_id for op in history] == [7, 8]


def test_of_filters_by_function() -> None:
    builder = Builder()
    put = builder.op("put", "k", 1, 0, 10)
    get = builder.op("get", "k", 1, 20, 30)
    builder.op("add", "bucket", 5, 0, 10)
    assert builder.history().of(F.PUT, F.GET) == [put, get]
