"""Re-ingest adds nothing; a crash in the middle leaves nothing half-ingested."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from kvtrace import connect
from kvtrace.errors import KvtraceError
from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse
from kvtrace.warehouse.rows import dsa_writer
from kvtrace.warehouse.rows.dsa_histograms import DsaHistograms
from tests.conftest import (
    local_only,
    run_kvtrace,
    seed_record,
    warehouse_at,
    write_jsonl,
)
from tests.ingest.family_files import FAMILIES, family_file
from tests.serving.fixtures import request_rows


def _counts(warehouse):
    con = connect(warehouse)
    tables = ("dsa_steps", "requests", "runs", "_dsa_offset_hist_files")
    return {t.strip("_"): con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}


def test_reingesting_the_same_bytes_adds_no_rows(warehouse, synthetic_trace):
    trace = synthetic_trace(requests=2, steps=2, layers=4)
    first = ingest(warehouse, [str(trace)])
    before = _counts(warehouse)
    again = ingest(warehouse, [str(trace.parent)])
    assert first.rows == 16 and again.rows == 0
    assert again.files[0].status == "already ingested"
    assert _counts(warehouse) == before


@local_only
def test_a_crash_after_some_files_were_written_leaves_nothing_visible(
    warehouse, synthetic_trace, monkeypatch
):
    trace = synthetic_trace(requests=2, steps=2, layers=4)
    monkeypatch.setattr(dsa_writer, "FLUSH_BYTES", 1)  # one data file per chunk

    def fail_after_data(self, warehouse, commit):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(DsaHistograms, "write", fail_after_data)
    with pytest.raises(KvtraceError, match="No space left on device"):
        ingest(warehouse, [str(trace)])
    assert _counts(warehouse) == {
        "dsa_steps": 0,
        "requests": 0,
        "runs": 0,
        "dsa_offset_hist_files": 0,
    }
    leftovers = [p for p in (warehouse.root / "dsa_steps").rglob("*.parquet")]
    assert leftovers == []
    monkeypatch.undo()
    assert ingest(warehouse, [str(trace)]).rows == 16


def test_a_killed_ingest_process_leaves_a_readable_warehouse(
    tmp_path, synthetic_trace, monkeypatch
):
    from kvtrace.warehouse import _object_lock as object_lock

    monkeypatch.setattr(object_lock, "STALE_AFTER_S", 1.0)  # on S3: the dead holder's lock
    trace = synthetic_trace(requests=4, steps=4, layers=61)
    root = warehouse_at(tmp_path / "wh")
    Warehouse(root, create=True)
    script = (
        "import sys, time\n"
        "from kvtrace.warehouse.rows import dsa_writer\n"
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
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "wrote"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    warehouse = Warehouse(root)
    assert len(warehouse.storage.listdir("dsa_steps")) > 1  # a data file beside the log
    assert _counts(warehouse)["dsa_steps"] == 0  # but nothing is visible
    started = time.monotonic()
    assert ingest(warehouse, [str(trace)]).rows == 4 * 4 * 61
    assert time.monotonic() - started < 60
    assert _counts(warehouse)["dsa_steps"] == 4 * 4 * 61


def test_a_grown_file_adds_only_its_new_records(warehouse, tmp_path):
    records = [seed_record(r, layer, 99, [1, 5]) for r in range(3) for layer in range(4)]
    path = write_jsonl(tmp_path / "run" / "trace.jsonl", records)
    assert ingest(warehouse, [str(path)]).rows == 12
    more = [seed_record(3, layer, 99, [2]) for layer in range(4)]
    write_jsonl(path, records + more)  # the tracer went on writing
    report = ingest(warehouse, [str(path)])
    assert report.rows == 4
    assert sum(report.files[0].skipped.values()) == 12
    assert _counts(warehouse)["dsa_steps"] == 16


def test_other_bytes_with_the_same_records_add_nothing(warehouse, tmp_path):
    records = [seed_record(r, 0, 99, [1, 5]) for r in range(3)]
    original = write_jsonl(tmp_path / "run" / "trace.jsonl", records)
    ingest(warehouse, [str(original)])
    copy = tmp_path / "run" / "copy.jsonl"
    copy.write_text(original.read_text() + "\n")  # one extra blank line: other bytes
    assert ingest(warehouse, [str(copy)]).rows == 0
    assert _counts(warehouse)["dsa_steps"] == 3


def test_lines_repeated_inside_one_file_are_stored_once(warehouse, tmp_path):
    records = [seed_record(r, 0, 99, [1, 5]) for r in range(3)]
    path = write_jsonl(tmp_path / "run" / "trace.jsonl", records + records[:2])
    report = ingest(warehouse, [str(path)])
    assert report.rows == 3
    assert report.files[0].skipped == {"record repeated within the file": 2}
    assert _counts(warehouse)["dsa_steps"] == 3


def test_a_hash_taken_alongside_the_read_is_the_files_and_same_sizes_are_told_apart(
    warehouse, tmp_path
):
    """A source of a size its run does not hold is hashed while it is read; one of a size
    it holds is hashed first.  Either way the commit records the file's own sha256, the
    same bytes are skipped and other bytes of the same size are ingested (adding only
    records the run does not hold: an arrival trace's record is its row)."""
    import hashlib

    header = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    first = tmp_path / "trace" / "a.csv"
    first.parent.mkdir()
    first.write_text(
        header + "2023-11-16 18:00:00.0000000,100,10\n2023-11-16 18:00:01.0000000,200,20\n"
    )
    same_size = tmp_path / "trace" / "b.csv"
    same_size.write_text(first.read_text().replace("100,10", "101,11"))
    assert first.stat().st_size == same_size.stat().st_size
    assert ingest(warehouse, [str(first)], run_name="arrivals").rows == 2
    second = ingest(warehouse, [str(same_size)], run_name="arrivals").files[0]
    assert (second.status, second.rows) == ("ingested", 0)
    assert second.skipped == {"record already stored (same request_idx)": 2}
    assert ingest(warehouse, [str(first)], run_name="arrivals").files[0].status == (
        "already ingested"
    )
    recorded = set(warehouse.snapshot().commits["source_sha256"].to_pylist())
    assert recorded == {hashlib.sha256(p.read_bytes()).hexdigest() for p in (first, same_size)}


def test_a_dsa_file_hashed_alongside_its_read_records_its_own_sha256(warehouse, synthetic_trace):
    import hashlib

    trace = synthetic_trace(requests=2, steps=2, layers=4)
    with open(trace, "a") as out:
        out.write("{not json\n")  # a quarantine row names the source by its hash too
    ingest(warehouse, [str(trace)])
    sha = hashlib.sha256(trace.read_bytes()).hexdigest()
    assert set(warehouse.snapshot().commits["source_sha256"].to_pylist()) == {sha}
    con = connect(warehouse)
    assert con.execute("SELECT DISTINCT source_sha256 FROM quarantine").fetchall() == [(sha,)]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_copy_in_another_folder_under_another_run_adds_nothing(warehouse, tmp_path, family):
    """The same bytes add nothing wherever they were ingested before: the report names
    the run that holds them.  A run the user names takes them as its own (a task's
    predictions unchanged between two evaluations belong to both), once."""
    original = family_file(tmp_path / "first", family)
    first = ingest(warehouse, [str(original)]).files[0]
    assert (first.status, first.family) == ("ingested", family)
    commits = warehouse.snapshot().commits.num_rows
    (tmp_path / "second").mkdir()
    copy = shutil.copy(original, tmp_path / "second")
    again = ingest(warehouse, [str(copy)]).files[0]
    assert (again.status, again.run_id, again.rows) == ("already ingested", first.run_id, 0)
    assert warehouse.snapshot().commits.num_rows == commits
    named = ingest(warehouse, [str(copy)], run_name="another").files[0]
    assert (named.status, named.rows) == ("ingested", first.rows)
    assert named.run_id != first.run_id
    twice = ingest(warehouse, [str(original)], run_name="another").files[0]
    assert (twice.status, twice.run_id) == ("already ingested", named.run_id)


def test_the_same_bytes_read_by_another_family_are_ingested(warehouse, tmp_path):
    """A vLLM result read as a benchmark, then as a run summary (--kind): other tables,
    so the second read is stored."""
    original = family_file(tmp_path / "first", "benchmark")
    assert ingest(warehouse, [str(original)]).files[0].family == "benchmark"
    again = ingest(warehouse, [str(original)], kind="summary", run_name="as-summary").files[0]
    assert (again.status, again.family, again.rows) == ("ingested", "summary", 1)


def test_a_metrics_file_copied_into_another_folder_is_already_ingested(tmp_path):
    """The folder names the run of a file named ``m.jsonl``: the copy names another run,
    and is still skipped, naming the run that holds its bytes."""
    rows = request_rows()
    first = write_jsonl(tmp_path / "a" / "m.jsonl", rows)
    write_jsonl(tmp_path / "b" / "m.jsonl", rows)
    root = warehouse_at(tmp_path / "wh")
    result = run_kvtrace("-w", root, "ingest", str(first.parent))
    run = re.search(r"into run (\S+)", result.stdout).group(1)
    again = run_kvtrace("-w", root, "ingest", str(tmp_path / "b"))
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == f"m.jsonl: already ingested (run {run})"
    count = connect(Warehouse(root)).execute("SELECT count(*) FROM request_metrics")
    assert count.fetchone()[0] == len(rows) == 100
