"""Ingest keeps its memory bounded: buffered rows become row groups as they arrive."""

from __future__ import annotations

import pyarrow.parquet as pq

from kvtrace import connect
from kvtrace.ingest import _lines as lines
from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse
from kvtrace.warehouse.rows import dsa_writer


def _row_groups(warehouse: Warehouse) -> int:
    files = sorted((warehouse.root / "dsa_steps").rglob("*.parquet"))
    return sum(pq.ParquetFile(f).metadata.num_row_groups for f in files)


def _everything(warehouse: Warehouse) -> dict:
    con = connect(warehouse)
    queries = {
        "steps": "SELECT * EXCLUDE (run_id) FROM dsa_steps ORDER BY request_id, step_idx, layer_id",
        "summary": "SELECT * EXCLUDE (run_id) FROM dsa_summary",
        "offsets": 'SELECT "offset", sum(n) FROM _dsa_offset_hist_files GROUP BY ALL ORDER BY 1',
        "fill": "SELECT tokens, sum(n) FROM _dsa_fill_hist_files GROUP BY ALL ORDER BY 1",
    }
    return {name: _rounded(con.execute(sql).fetchall()) for name, sql in queries.items()}


def _rounded(value):
    """Floats to 12 significant digits (a parallel mean may differ in its last bits)."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    return value


def test_buffered_rows_are_flushed_as_row_groups_with_identical_results(
    tmp_path, synthetic_trace, monkeypatch
):
    trace = synthetic_trace(requests=4, steps=6, layers=8, topk=256)
    whole = Warehouse(tmp_path / "whole", create=True)
    ingest(whole, [str(trace)])
    assert _row_groups(whole) == 1

    monkeypatch.setattr(lines, "CHUNK_BYTES", 20_000)  # many small chunks ...
    monkeypatch.setattr(dsa_writer, "FLUSH_BYTES", 30_000)  # ... flushed every few
    bounded = Warehouse(tmp_path / "bounded", create=True)
    result = ingest(bounded, [str(trace)])
    assert result.rows == 4 * 6 * 8
    assert _row_groups(bounded) >= 5
    assert _everything(bounded) == _everything(whole)
