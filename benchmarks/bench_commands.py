"""Whole-process benchmark: kvtrace commands as a user runs them, each beside the tool a
user would reach for instead, every pair measured in the same round, rounds interleaved.

    python benchmarks/bench_commands.py [--rounds 5] [--requests 1000000]

Rows (each a fresh process on each side):

1. ``kvtrace --help``, beside a bare ``python -c pass`` (the interpreter's own floor);
2. ``kvtrace sql "SELECT 1"``, beside DuckDB answering the same from Python;
3. ``kvtrace.connect(...)`` from Python and one count of the Mooncake warehouse's
   requests, beside DuckDB's ``SELECT 1`` from Python (imports included);
4. ``kvtrace sql`` of a run's arrival summary and request lengths on the Mooncake
   conversation trace's warehouse, beside DuckDB reading the trace's JSONL for the same
   two aggregates;
5. the Mooncake trace ingested and those two queries asked (three commands), beside
   pandas reading the JSONL and computing them (one process);
6. the same for the Azure code trace (8,819 requests, CSV), beside pandas' ``read_csv``;
7. the LRU prefix hit curve at 11 capacities (``workload_prefix_hit_curve``, radix_lru,
   prefix semantics, token weight, warm-up 0.5), beside ``kvcache-simulator run``'s
   sweep of the same trace (which computes three policies at 13 budgets; its own floor);
8. with ``--requests N``, row 5 again on a generated Mooncake-like trace of N requests
   (``bench_workload.write_mooncake``: conversations that extend their earlier turns).

Prints a Markdown table of medians with the machine described, and writes
``benchmarks/out/commands.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_prefix import BIN, KVCACHE_SIMULATOR_RUN, TRACE
from bench_warehouse import machine
from bench_workload import write_mooncake

HERE = Path(__file__).parent
KVTRACE = str(BIN / "kvtrace")
PY = sys.executable
AZURE_TRACE = HERE.parent / "tests" / "data" / "azure_llm_inference_code.csv"
CAPACITIES = "[16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]"
WORKLOAD_SQL = (
    "SELECT requests, round(rate_per_s, 4), round(gap_cv, 4) FROM workload_arrival_summary; "
    "SELECT requests, input_mean, input_p90, output_mean FROM workload_lengths"
)
DUCKDB_JSONL = f"""
import duckdb
con = duckdb.connect()
con.sql("CREATE VIEW t AS SELECT * FROM read_json_auto('{TRACE}')")
print(con.sql('''SELECT count(*), (count(*) - 1) / ((max(timestamp) - min(timestamp)) / 1000.0)
                 FROM t''').fetchall())
print(con.sql('''SELECT avg(input_length), quantile_cont(input_length, 0.9), avg(output_length)
                 FROM t''').fetchall())
"""
PANDAS_MOONCAKE = """
import pandas as pd
frame = pd.read_json('{trace}', lines=True)
arrival = frame['timestamp'].sort_values() / 1000.0
gaps = arrival.diff().dropna()
span = arrival.iloc[-1] - arrival.iloc[0]
print(len(frame), (len(frame) - 1) / span, gaps.std(ddof=0) / gaps.mean())
inputs = frame['input_length']
print(inputs.mean(), inputs.quantile(0.9), frame['output_length'].mean())
"""
PANDAS_AZURE = """
import pandas as pd
frame = pd.read_csv('{trace}')
arrival = pd.to_datetime(frame['TIMESTAMP']).astype('int64').sort_values() / 1e9
gaps = arrival.diff().dropna()
span = arrival.iloc[-1] - arrival.iloc[0]
print(len(frame), (len(frame) - 1) / span, gaps.std(ddof=0) / gaps.mean())
inputs = frame['ContextTokens']
print(inputs.mean(), inputs.quantile(0.9), frame['GeneratedTokens'].mean())
"""


def timed(commands: list[list[str]]) -> float:
    """Seconds to run ``commands`` one after another, each a fresh process."""
    start = time.perf_counter()
    for command in commands:
        subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - start


Row = tuple[str, str, list[list[str]], list[list[str]]]


def ingest_and_ask(
    trace: Path, fresh: str, pandas: str = PANDAS_MOONCAKE
) -> tuple[list[list[str]], list[list[str]]]:
    """The ``pandas`` script's one process on ``trace``, and kvtrace's three commands on a
    new warehouse ``fresh``: ingest ``trace``, then the two workload queries."""
    return (
        [[PY, "-c", pandas.format(trace=trace)]],
        [
            ["rm", "-rf", fresh],
            [KVTRACE, "-q", "-w", fresh, "ingest", str(trace)],
            [KVTRACE, "-w", fresh, "sql", WORKLOAD_SQL.split("; ")[0]],
            [KVTRACE, "-w", fresh, "sql", WORKLOAD_SQL.split("; ")[1]],
        ],
    )


def rows(root: str, scratch: Path, requests: int) -> list[Row]:
    """(job, other tool, its commands, kvtrace's commands) for each row."""
    fresh = str(scratch / "fresh")
    table: list[Row] = [
        ("`kvtrace --help`", "`python -c pass`", [[PY, "-c", "pass"]], [[KVTRACE, "--help"]]),
        (
            '`kvtrace sql "SELECT 1"`',
            "DuckDB from Python",
            [[PY, "-c", "import duckdb; duckdb.sql('SELECT 1').fetchall()"]],
            [[KVTRACE, "-w", root, "sql", "SELECT 1"]],
        ),
        (
            "`kvtrace.connect(...)` and one query, from Python",
            "DuckDB from Python",
            [[PY, "-c", "import duckdb; duckdb.connect().sql('SELECT 1').fetchall()"]],
            [
                [
                    PY,
                    "-c",
                    f"import kvtrace; kvtrace.connect({root!r})"
                    ".sql('SELECT count(*) FROM workload_requests').fetchall()",
                ]
            ],
        ),
        (
            "arrival summary + lengths, Mooncake warehouse",
            "DuckDB over the JSONL",
            [[PY, "-c", DUCKDB_JSONL]],
            [[KVTRACE, "-w", root, "sql", WORKLOAD_SQL]],
        ),
        (
            "Mooncake ingest + the 2 queries",
            "pandas read + the same aggregates",
            *ingest_and_ask(TRACE, fresh),
        ),
        (
            "Azure code trace ingest + the 2 queries",
            "pandas read + the same aggregates",
            *ingest_and_ask(AZURE_TRACE, fresh, PANDAS_AZURE),
        ),
        (
            "Mooncake prefix hit curve, 11 capacities",
            "`kvcache-simulator run`",
            [KVCACHE_SIMULATOR_RUN],
            [
                [
                    KVTRACE,
                    "-w",
                    root,
                    "sql",
                    f"FROM workload_prefix_hit_curve('radix_lru', {CAPACITIES}, 'prefix', "
                    "'tokens', 0.5)",
                ]
            ],
        ),
    ]
    if requests:
        trace = scratch / "generated.jsonl"
        write_mooncake(trace, requests, np.random.default_rng(0))
        table.append(
            (
                f"Mooncake-like {requests:,} requests ({trace.stat().st_size / 1e6:.0f} MB): "
                "ingest + the 2 queries",
                "pandas read + the same aggregates",
                *ingest_and_ask(trace, fresh),
            )
        )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--requests", type=int, default=0, help="add row 8 on a generated trace of N requests"
    )
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="kvtrace-bench-commands-"))
    try:
        root = str(scratch / "warehouse")
        subprocess.run([KVTRACE, "-q", "-w", root, "ingest", str(TRACE)], check=True)
        table = rows(root, scratch, args.requests)
        times: dict[str, dict[str, list[float]]] = {
            job: {"other": [], "kvtrace": []} for job, *_ in table
        }
        for _ in range(args.rounds):
            for job, _tool, theirs, ours in table:
                times[job]["other"].append(timed(theirs))
                times[job]["kvtrace"].append(timed(ours))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results = []
    print(f"Machine: {machine()}; medians of {args.rounds} interleaved rounds.\n")
    print("| job | other tool | other | kvtrace | ratio (other / kvtrace) |")
    print("|---|---|---|---|---|")
    for job, tool, *_ in table:
        other = statistics.median(times[job]["other"])
        ours = statistics.median(times[job]["kvtrace"])
        results.append(
            {
                "job": job,
                "other_tool": tool,
                "other_s": other,
                "kvtrace_s": ours,
                "ratio": other / ours,
            }
        )
        print(f"| {job} | {tool} | {other:.2f} s | {ours:.2f} s | {other / ours:.2f}x |")
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "commands.json").write_text(
        json.dumps({"machine": machine(), "rounds": args.rounds, "rows": results}, indent=2)
    )


if __name__ == "__main__":
    main()
