"""Re-ingest adds nothing; a crash in the middle leaves nothing half-ingested."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from kvtrace import dsa_writer
from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse


def _counts(warehouse):
    con = warehouse.connect()
    tables = ("dsa_steps", "requests", "runs", "_dsa_offset_hist_files")
    return {t.strip("_"): con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in tables}


def test_reingesting_the_same_bytes_adds_no_rows(warehouse, synthetic_trace):
    trace = synthetic_trace(requests=2, steps=2, layers=4)
    first = ingest(warehouse, [str(trace)])
    before = _counts(warehouse)
    again = ingest(warehouse, [str(trace.parent)])
    assert first.rows == 16 and again.rows == 0
    assert again.files[0].status == "already ingested"
    assert _counts(warehouse) == before


def test_a_crash_after_some_files_were_written_leaves_nothing_visible(
        warehouse, synthetic_trace, monkeypatch):
    trace = synthetic_trace(requests=2, steps=2, layers=4)
    monkeypatch.setattr(dsa_writer, "FLUSH_BYTES", 1)  # one data file per chunk

    def fail_after_data(self):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dsa_writer.DsaWriter, "_write_histograms", fail_after_data)
    with pytest.raises(OSError):
        ingest(warehouse, [str(trace)])
    assert _counts(warehouse) == {"dsa_steps": 0, "requests": 0, "runs": 0,
                                  "dsa_offset_hist_files": 0}
    leftovers = [p for p in (warehouse.root / "dsa_steps").rglob("*.parquet")]
    assert leftovers == []
    monkeypatch.undo()
    assert ingest(warehouse, [str(trace)]).rows == 16


def test_a_killed_ingest_process_leaves_a_readable_warehouse(tmp_path, synthetic_trace):
    trace = synthetic_trace(requests=4, steps=4, layers=61)
    root = tmp_path / "wh"
    Warehouse(root, create=True)
    script = (
        "import sys, time\n"
        "from kvtrace import dsa_writer\n"
        "from kvtrace.ingest import ingest\n"
        "from kvtrace.warehouse import Warehouse\n"
        "dsa_writer.FLUSH_BYTES = 1\n"
        "original = Warehouse.write\n"
        "def slow(self, *a, **k):\n"
        "    original(self, *a, **k)\n"
        "    print('wrote', flush=True)\n"
        "    time.sleep(30)\n"
        "Warehouse.write = slow\n"
        f"ingest(Warehouse({str(root)!r}), [{str(trace)!r}])\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                               text=True)
    assert process.stdout.readline().strip() == "wrote"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    warehouse = Warehouse(root)
    assert list((root / "dsa_steps").rglob("*.parquet"))  # a data file was renamed in
    assert _counts(warehouse)["dsa_steps"] == 0            # but nothing is visible
    started = time.monotonic()
    assert ingest(warehouse, [str(trace)]).rows == 4 * 4 * 61
    assert time.monotonic() - started < 60
    assert _counts(warehouse)["dsa_steps"] == 4 * 4 * 61
