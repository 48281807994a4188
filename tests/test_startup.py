"""What a command loads before it answers: no pandas, no torch, numba only when a kernel
runs (each costs a fresh process a fifth of a second or more).  Read from the modules a
real command process holds when it exits."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kvtrace.ingest import ingest
from tests.conftest import DATA

HEAVY = ("pandas", "torch", "numba")


PROBE = """
import os, sys
exit_now, listing = os._exit, sys.argv[1]
def report_and_exit(code):
    with open(listing, "w") as out:
        out.write("\\n".join(sorted(name for name, module in sys.modules.items() if module)))
    exit_now(code)
os._exit = report_and_exit
sys.argv = ["kvtrace", *sys.argv[2:]]
from kvtrace.cli import main
try:
    main()
finally:
    report_and_exit(0)
"""


def _imported(*args: str, tmp_path) -> set[str]:
    """The top-level modules a ``kvtrace`` command holds when it ends."""
    listing = tmp_path / "modules.txt"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(listing), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return {name.split(".")[0] for name in listing.read_text().split()}


def test_help_imports_nothing_heavy(tmp_path):
    assert not _imported("--help", tmp_path=tmp_path) & {*HEAVY, "pyarrow", "duckdb"}


@pytest.mark.parametrize(
    "query",
    ["SELECT 1", "SELECT count(*) FROM runs", "SELECT count(*) FROM serving_benchmark"],
)
def test_a_query_loads_no_pandas_torch_or_numba(warehouse, query, tmp_path):
    ingest(warehouse, [str(DATA / "workload" / "vllm_bench_example.json")])
    loaded = _imported("-w", warehouse.location, "sql", query, tmp_path=tmp_path)
    assert not loaded & set(HEAVY)


def test_numba_loads_when_a_kernel_runs(warehouse, tmp_path):
    ingest(warehouse, [str(DATA / "mooncake_conversation_trace.jsonl")])
    loaded = _imported(
        "-w",
        warehouse.location,
        "sql",
        "FROM workload_prefix_hit_curve('lru', [64], 'prefix')",
        tmp_path=tmp_path,
    )
    assert "numba" in loaded and not loaded & {"pandas", "torch"}
