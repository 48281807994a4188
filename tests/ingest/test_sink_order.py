"""A table's rows are stored in its order whatever order a file gives them in, and
`in_order` (which lets rows already in order skip the sort) agrees with Python's sort."""

from __future__ import annotations

import random

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from kvtrace.ingest import ingest
from kvtrace.ingest._record_keys import in_order
from tests.conftest import write_jsonl
from tests.serving.fixtures import request_rows


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-2, 2)), max_size=8))
def test_in_order_agrees_with_python_sorting(rows):
    table = pa.table(
        {"a": [a for a, _ in rows], "b": [b for _, b in rows]},
        schema=pa.schema([("a", pa.int64()), ("b", pa.int64())]),
    )
    assert in_order(table) == (rows == sorted(rows))
    assert in_order(table, strictly=True) == (rows == sorted(set(rows)))


def test_a_column_with_a_null_or_nan_is_out_of_order():
    assert not in_order(pa.table({"a": [1, None, 3]}))
    assert not in_order(pa.table({"a": [1.0, float("nan"), 3.0]}))
    assert in_order(pa.table({"a": [None]}))  # one row: nothing to compare


def test_shuffled_rows_are_stored_in_the_tables_order(warehouse, tmp_path):
    rows = request_rows()
    random.Random(7).shuffle(rows)
    report = ingest(warehouse, [str(write_jsonl(tmp_path / "exp1_metrics.jsonl", rows))])
    files = warehouse.run_files(report.files[0].run_id, "request_metrics")
    stored = warehouse.read_files(files)["request_id"].to_pylist()  # sorted by arrival_s
    assert stored == [row["request_id"] for row in sorted(rows, key=lambda r: r["arrival_s"])]
    assert stored != [row["request_id"] for row in rows]  # the shuffle did change the order
