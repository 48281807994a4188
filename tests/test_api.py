"""The Python API: kvtrace.connect gives Arrow and polars results; writers may run at once."""

from __future__ import annotations

import subprocess
import sys

import polars as pl
import pyarrow as pa

import kvtrace
from kvtrace import connect
from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse
from tests.conftest import read_records, warehouse_at


def test_connect_returns_arrow_and_polars(warehouse, synthetic_trace, monkeypatch):
    trace = synthetic_trace(requests=1, steps=2, layers=3)
    ingest(warehouse, [str(trace)])
    con = kvtrace.connect(warehouse.location)
    frame = con.sql("SELECT layer_id, rows FROM dsa_layer_profile ORDER BY layer_id").pl()
    assert isinstance(frame, pl.DataFrame)
    assert frame.to_dicts() == [{"layer_id": i, "rows": 2} for i in range(3)]
    table = con.sql("FROM dsa_blocks(4)").to_arrow_table()
    assert isinstance(table, pa.Table) and table.num_rows == 6
    monkeypatch.setenv("KVTRACE_WAREHOUSE", warehouse.location)
    assert kvtrace.connect().execute("SELECT count(*) FROM dsa_steps").fetchone() == (6,)


def test_two_processes_ingesting_at_once_lose_nothing(tmp_path, synthetic_trace):
    first = synthetic_trace("rank0", requests=2, steps=3, layers=61)
    second = synthetic_trace("rank1", requests=2, steps=3, layers=61, seed=1)
    root = warehouse_at(tmp_path / "wh")
    Warehouse(root, create=True)
    script = (
        "import sys; from kvtrace.ingest import ingest; "
        "from kvtrace.warehouse import Warehouse; "
        "ingest(Warehouse(sys.argv[1]), [sys.argv[2]])"
    )
    workers = [
        subprocess.Popen([sys.executable, "-c", script, str(root), str(path)])
        for path in (first, second)
    ]
    assert [w.wait() for w in workers] == [0, 0]
    con = connect(Warehouse(root))
    counts = dict(
        con.execute(
            "SELECT r.run_name, count(*) FROM dsa_steps JOIN runs AS r USING (run_id) GROUP BY 1"
        ).fetchall()
    )
    assert counts == {"rank0": len(read_records(first)), "rank1": len(read_records(second))}
