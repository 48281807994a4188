"""What a command loads before it answers: no pandas, no torch, numba only when a kernel
runs, and for a query whose snapshot is kept on disk no Arrow, Delta Lake or NumPy (each
costs a fresh process a tenth of a second or more).  Read from the modules a
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


@pytest.mark.parametrize(
    "query", ["SELECT 1", "SELECT count(*) FROM runs", "FROM workload_arrival_summary"]
)
def test_a_query_on_a_kept_snapshot_loads_no_arrow_delta_lake_or_numpy(warehouse, query, tmp_path):
    if warehouse.root is None:
        pytest.skip("an object store's files are read through Arrow")
    ingest(warehouse, [str(DATA / "mooncake_conversation_trace.jsonl")])
    command = ("-w", warehouse.location, "sql", query)
    _imported(*command, tmp_path=tmp_path)  # the first computes the snapshot and keeps it
    assert not _imported(*command, tmp_path=tmp_path) & {*HEAVY, "pyarrow", "deltalake", "numpy"}


def test_ingesting_an_arrival_trace_loads_no_pandas_numba_or_console_library(tmp_path):
    trace = str(DATA / "mooncake_conversation_trace.jsonl")
    loaded = _imported("-q", "-w", str(tmp_path / "wh"), "ingest", trace, tmp_path=tmp_path)
    assert "pyarrow" in loaded and not loaded & {*HEAVY, "rich"}


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


def test_a_statement_reads_the_tables_it_names_and_those_its_analyses_read(warehouse):
    import duckdb

    from kvtrace import connect
    from kvtrace.analysis.function_specs import FUNCTIONS
    from kvtrace.analysis.functions import register

    def reads(con, table: str) -> bool:
        found = con.sql(
            "SELECT count(*) FROM duckdb_views() "
            f"WHERE database_name = 'memory' AND view_name = '_{table}_files'"
        )
        return bool(found.fetchall()[0][0])

    small = connect(warehouse, for_sql="SELECT count(*) FROM runs")
    assert reads(small, "runs") and not reads(small, "kv_events")
    # the what-if reads the arrivals of workload runs when it runs: they are read too
    analysis = connect(warehouse, for_sql="FROM dsa_hit_curve(16)")
    assert reads(analysis, "workload_requests") and not reads(analysis, "kv_events")
    probe = duckdb.connect()
    register(probe)
    installed = {
        name
        for (name,) in probe.sql(
            "SELECT DISTINCT function_name FROM duckdb_functions() "
            "WHERE function_name LIKE 'kvtrace_%'"
        ).fetchall()
    }
    assert installed == {function.name for function in FUNCTIONS}


def test_every_analysis_answers_on_a_connection_bound_for_it(warehouse, synthetic_trace, tmp_path):
    from kvtrace import connect

    dsa = synthetic_trace(run_name="dsa-run", requests=2, steps=3, layers=2)
    batches = tmp_path / "batch_metrics.csv"
    batches.write_text(
        "Batch Id,batch_size,batch_num_tokens,batch_num_prefill_tokens,"
        "batch_num_decode_tokens,batch_execution_time\n"
        + "".join(f"{i},2,{100 * i + 2},{100 * i},2,{0.01 + 0.0001 * i}\n" for i in range(20))
    )
    ingest(
        warehouse,
        [
            str(dsa),
            str(DATA / "mooncake_conversation_trace.jsonl"),
            str(DATA / "kv_events" / "mooncake_lru600_events.jsonl"),
            str(DATA / "workload" / "vidur_request_metrics_example.csv"),
            str(batches),
        ],
    )
    statements = [
        "FROM dsa_hit_curve(16)",
        "FROM dsa_reuse(16)",
        "FROM workload_prefix_hit_curve('lru', [64], 'prefix')",
        "FROM workload_prefix_requests('lru', [64])",
        "FROM timing_cost_model()",
        "FROM kv_cache_fidelity(bucket_s := 60.0)",
    ]
    for statement in statements:
        rows = connect(warehouse, for_sql=statement).sql(statement).fetchall()
        assert rows, statement
