"""Which run a profiler trace goes to when no --run-name is given.

A trace named on the command line that is its job's only process (its
``distributedInfo`` has no ``world_size`` above 1 and no ``rank`` above 0) is named
after its file; one rank of several, or a trace found in a folder (beside the counters
of the same run), after its folder, so the ranks and the counters join one run.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from kvtrace.ingest import ingest
from tests.conftest import DATA


def _trace(path: Path, distributed_info: dict | None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {} if distributed_info is None else {"distributedInfo": distributed_info}
    events = [{"ph": "X", "cat": "kernel", "name": "gemm", "ts": 0, "dur": 5, "pid": 0, "tid": 7}]
    path.write_text(json.dumps({"schemaVersion": 1, **header, "traceEvents": events}))
    return path


def _run_names(report) -> list[str]:
    """The run names before the id's ``-<8 hex>`` suffix."""
    return [f.run_id.rsplit("-", 1)[0] for f in report.files]


def test_the_alexnet_trace_is_named_after_its_file_not_its_folder(warehouse, tmp_path):
    # HTA's alexnet trace: distributedInfo {"rank": 0}, one process; in a folder "mixed"
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    trace = shutil.copy(DATA / "hta_alexnet_trace.json.gz", mixed / "alexnet_trace.json.gz")
    assert _run_names(ingest(warehouse, [str(trace)])) == ["alexnet_trace"]


@pytest.mark.parametrize(
    "file, info, run",
    [
        ("step.pt.trace.json", None, "step"),  # no distributedInfo at all
        (
            "host_12.1700000000000.pt.trace.json.gz",
            {"rank": 0, "world_size": 1},
            "host_12.1700000000000",
        ),
        ("rank3.json", {"rank": 3, "world_size": 8}, "job"),  # one rank of eight
        ("rank0.json", {"rank": 0, "world_size": 8}, "job"),
        ("rank1.json", {"rank": 1}, "job"),  # a rank above 0 without its world size
    ],
)
def test_a_named_trace_of_one_process_gets_its_file_name(warehouse, tmp_path, file, info, run):
    trace = _trace(tmp_path / "job" / file, info)
    if file.endswith(".gz"):  # written as plain JSON: gzip it under the same name
        trace.write_bytes(gzip.compress(trace.read_bytes()))
    assert _run_names(ingest(warehouse, [str(trace)])) == [run]


def test_a_folders_trace_joins_its_counters_in_the_folders_run(warehouse, tmp_path):
    folder = shutil.copytree(DATA / "offload", tmp_path / "offload")
    assert _run_names(ingest(warehouse, [str(folder)])) == ["offload", "offload"]


def test_run_name_wins(warehouse, tmp_path):
    trace = _trace(tmp_path / "job" / "step.pt.trace.json", None)
    assert _run_names(ingest(warehouse, [str(trace)], run_name="mine")) == ["mine"]
