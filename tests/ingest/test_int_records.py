"""Records of integers and integer arrays read by the compiled pass: the same table and
quarantine as Arrow's reader gives, and the chunk given up whenever a line is not plain."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtrace.ingest._lines import Chunk, IntRecords, _parse_int_records, parse_chunk
from kvtrace.ingest.readers.workload import _MOONCAKE_RECORDS, _MOONCAKE_SCHEMA
from tests.conftest import chunk_of

PLAIN = [
    b'{"timestamp": 0, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47]}',
    b'{"hash_ids":[],"output_length":0,"input_length":-3,"timestamp":999999999999999999}',
    b'  { "timestamp" : 27482 ,"input_length":1, "output_length": 2, "hash_ids": [ -1 , 0 ] }\r',
]
UNUSUAL = [
    b'{"timestamp": 1.5, "input_length": 1, "output_length": 2, "hash_ids": [1]}',
    b'{"timestamp": 1e3, "input_length": 1, "output_length": 2, "hash_ids": [1]}',
    b'{"timestamp": -0, "input_length": 1, "output_length": 2, "hash_ids": [1]}',
    b'{"timestamp": 01, "input_length": 1, "output_length": 2, "hash_ids": [1]}',
    b'{"timestamp": 1, "input_length": null, "output_length": 2, "hash_ids": [1]}',
    b'{"timestamp": 1, "input_length": "7", "output_length": 2, "hash_ids": [1]}',
    b'{"timestamp": 1, "input_length": 1, "output_length": 2, "hash_ids": [1, 2.0]}',
    b'{"timestamp": 1, "input_length": 1, "output_length": 2, "hash_ids": null}',
    b'{"timestamp": 1, "input_length": 1, "output_length": 2}',
    b'{"timestamp": 1, "input_length": 1, "output_length": 2, "hash_ids": [1], "x": 1}',
    b'{"timestamp": 1, "input_length": 1, "output_length": 2, "hash_ids": [1],}',
    b'{"timestamp": 1, "timestamp": 2, "input_length": 1, "output_length": 2, "hash_ids": []}',
    b'{"time\\u0073tamp": 1, "input_length": 1, "output_length": 2, "hash_ids": [1]}',
    b'{"timestamp": 1, "input_length": 1, "output_length": 2, "hash_ids": [1]} x',
    b'{"timestamp": 1, "input_length": 1, "output_length": 2, "hash_ids": [1',
    b'{"timestamp": 99999999999999999999, "input_length": 1, "output_length": 2, "hash_ids": [1]}',
    b'{"timestamp": 1, "input_length": 1, "output_length": 2, "hash_ids": [1], "session_id": "s"}',
    b"[1, 2]",
    b"",
]


def _both(chunk: Chunk):
    return parse_chunk(chunk, _MOONCAKE_SCHEMA), parse_chunk(
        chunk, _MOONCAKE_SCHEMA, int_records=_MOONCAKE_RECORDS
    )


def _assert_same(chunk: Chunk) -> None:
    plain, compiled = _both(chunk)
    assert compiled.table.equals(plain.table)
    assert list(compiled.line_numbers) == list(plain.line_numbers)
    assert compiled.bad == plain.bad


def test_plain_records_give_arrows_table():
    chunk = chunk_of(PLAIN)
    assert _parse_int_records(chunk, _MOONCAKE_SCHEMA, _MOONCAKE_RECORDS) is not None
    _assert_same(chunk)
    table = parse_chunk(chunk, _MOONCAKE_SCHEMA, int_records=_MOONCAKE_RECORDS).table
    assert table.column("hash_ids").to_pylist() == [[46, 47], [], [-1, 0]]
    assert table.column("timestamp").to_pylist() == [0.0, 1e18 - 1, 27482.0]


@pytest.mark.parametrize("unusual", UNUSUAL)
def test_a_chunk_with_an_unusual_line_is_given_up_and_gives_the_same_rows(unusual):
    chunk = chunk_of([*PLAIN, unusual, *PLAIN])
    assert _parse_int_records(chunk, _MOONCAKE_SCHEMA, _MOONCAKE_RECORDS) is None
    _assert_same(chunk)


_int = st.integers(-(10**18) + 1, 10**18 - 1)
_value = st.one_of(
    _int,
    st.lists(_int, max_size=6),
    st.floats(-1e6, 1e6, allow_nan=False),
    st.none(),
    st.sampled_from(["", "7", "hash_ids", '"', "\\"]),
)


@st.composite
def records(draw) -> dict:
    """A Mooncake record, usually plain; now and then a field of another kind, missing,
    or one more field."""
    record = {
        "timestamp": draw(st.integers(0, 10**15)),
        "input_length": draw(st.integers(-5, 10**6)),
        "output_length": draw(st.integers(-5, 10**6)),
        "hash_ids": draw(st.lists(_int, max_size=8)),
    }
    if draw(st.integers(0, 9)) == 0:
        record[draw(st.sampled_from([*record, "session_id"]))] = draw(_value)
    if draw(st.integers(0, 9)) == 0:
        del record[draw(st.sampled_from(sorted(record)))]
    order = draw(st.permutations(list(record)))
    return {key: record[key] for key in order}


@settings(max_examples=300, deadline=None)
@given(st.lists(records(), min_size=1, max_size=8), st.sampled_from([None, (",", ":")]))
def test_any_chunk_gives_arrows_rows_and_quarantine(batch, separators):
    lines = [json.dumps(record, separators=separators).encode() for record in batch]
    _assert_same(chunk_of(lines))


def test_integer_records_of_another_layout():
    schema_fields = IntRecords(scalars=("a",), lists=("b", "c"))

    schema = pa.schema(
        [("a", pa.int64()), ("b", pa.list_(pa.int64())), ("c", pa.list_(pa.int64()))]
    )
    chunk = chunk_of([b'{"c": [3], "a": 1, "b": []}', b'{"a": -2, "b": [1, 2], "c": []}'])
    table = _parse_int_records(chunk, schema, schema_fields)
    assert table is not None
    assert table.to_pylist() == [
        {"a": 1, "b": [], "c": [3]},
        {"a": -2, "b": [1, 2], "c": []},
    ]
    assert np.array_equal(parse_chunk(chunk, schema).table["a"].to_numpy(), [1, -2])
