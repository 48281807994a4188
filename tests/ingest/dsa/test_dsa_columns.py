"""Every DSA source maps onto the one canonical column set."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from kvtrace.collectors.dsa_tracer import DsaTracer
from kvtrace.ingest._lines import Chunk, parse_chunk
from kvtrace.ingest.readers.dsa_formats import SCHEMAS, canonical
from kvtrace.warehouse.rows.dsa_columns import CANONICAL_DSA, complete
from tests.conftest import seed_record

NESTED = {
    "event": "dsa_topk",
    "request_id": "r1",
    "is_decode": True,
    "layer_id": 0,
    "step_idx": 1,
    "seq_len_current": 40,
    "topk": 2,
    "selected_token_pos": [3, 9],
    "stats": {"unique_token_pos_count": 2},
    "block": {"block_size": 16},
}


def _parsed(record: dict, fmt: str) -> pa.Table:
    data = (json.dumps(record) + "\n").encode()
    return parse_chunk(Chunk(data, 1, 1, len(data)), SCHEMAS[fmt]).table


@pytest.mark.parametrize(
    "record, fmt", [(seed_record(0, 0, 40, [3, 9]), "seed"), (NESTED, "nested")]
)
def test_both_layouts_map_onto_canonical_columns_only(record, fmt):
    columns = canonical(_parsed(record, fmt), fmt)
    assert set(columns) <= set(CANONICAL_DSA.names)
    completed = complete(columns, 1)
    assert list(completed) == CANONICAL_DSA.names
    assert completed["positions"].to_pylist() == [[3, 9]]


def test_the_tracer_hands_the_writer_canonical_columns_only(warehouse, monkeypatch):
    from kvtrace.warehouse.rows import dsa_writer

    seen: list[set[str]] = []
    add = dsa_writer.DsaWriter.add

    def spy(self, cols, lines, raw_of):
        seen.append(set(cols))
        return add(self, cols, lines, raw_of)

    monkeypatch.setattr(dsa_writer.DsaWriter, "add", spy)
    with DsaTracer(warehouse, run_name="live", dataset="unit", block_sizes=(16,)) as tracer:
        tracer.begin_request(0, list(range(40)))
        with tracer.step(40):
            tracer.record_topk(0, np.array([1, 2, 3]))
    assert seen and all(names <= set(CANONICAL_DSA.names) for names in seen)


def test_an_unknown_column_is_a_mapping_error():
    with pytest.raises(ValueError, match="not canonical DSA columns: seq_length"):
        complete({"seq_length": pa.array([1])}, 1)
