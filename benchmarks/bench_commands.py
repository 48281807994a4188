"""Whole-process benchmark: kvtrace commands as a user runs them, each beside the tool a
user would reach for instead, both sides doing the same work, every pair measured in the
same round, rounds interleaved.

    python benchmarks/bench_commands.py [--rounds 5] [--requests 1000000]
                                        [--dsa-mb 233 [466 932]] [--tracer] [--readme]

Rows (each a fresh process on each side, under GNU time: wall and CPU seconds, peak RSS;
the table's "both compute" column says what each side computes):

1. ``kvtrace --help`` beside ``kvcache-simulator --help``: a Python command line's
   start-up, printing its help;
2. ``kvtrace sql "SELECT 1"`` beside DuckDB answering the same from Python;
3. ``kvtrace.connect(...)`` from Python and a count of the Mooncake warehouse's requests,
   beside DuckDB counting the rows of that table's Parquet files from Python;
4. ``kvtrace sql`` of a run's arrival summary and request lengths (the 15 statistics of
   ``workload_arrival_summary`` and ``workload_lengths``, one statement) on the Mooncake
   conversation trace's warehouse, beside DuckDB computing the same 15 from the JSONL;
5. the Mooncake trace ingested into a new warehouse and those statistics asked, as two
   commands and as one (``ingest --sql``), beside pandas reading the JSONL and computing
   the same 15 (one process);
6. the same for the Azure code trace (8,819 requests, CSV), beside pandas' ``read_csv``;
7. the LRU radix-tree prefix cache at 11 budgets of Llama-3.1-8B's KV cache (1 to 1,024
   GiB: 16 to 16,384 blocks of 512 tokens), half the requests as warm-up, token hit
   rates: ``kvtrace prefix-curve --policy radix_lru``, beside ``kvcache-simulator run``
   asked for that one policy (``--policies lru``) at those budgets (``--budgets-gib``);
8. a one-rank profiler trace (0.45 MB, `bench_timeline_hta.write_traces`) ingested and
   three analyses asked (two commands, and one), beside HTA loading it and running the
   same three: temporal breakdown, comm / comp overlap, GPU kernel breakdown (when HTA
   is installed);
9. with ``--requests N``, the two rows of 5 again on a generated Mooncake-like trace of N
   requests (``bench_workload.write_mooncake``: conversations that extend their earlier
   turns);
10. with ``--dsa-mb M [M ...]``, a generated seed-format DSA trace of each size M MB
    ingested by ``kvtrace ingest``, beside a Python process running DuckDB's
    ``COPY (FROM read_json(...)) TO parquet`` (several sizes show how peak memory grows);
11. and the first trace's five ``dsa_summary`` statistics from a fresh ``kvtrace sql``,
    beside DuckDB computing the same from the JSONL (``summary_over_jsonl.sql``);
12. with ``--tracer``, the overhead of the DSA tracer on decode: ``bench_tracer.py``'s
    untraced and traced ``dsa-ref`` decodes (8 layers, a 4,000-token prompt, 320 steps),
    interleaved in one process for the same number of rounds, the ratio taken within
    each round (decode alone: a process's start-up and prefill would hide it).

kvtrace's modules are byte-compiled first, as an installed package has them, and a bare
``python -c pass`` runs each round (the interpreter's floor, given above the table).
Before the rounds the answers of both sides are compared on rows 3 to 9 (the benchmark
stops when they differ).  Prints a Markdown table of medians, with the spread of the
rounds' ratios and the machine described, and writes ``benchmarks/out/commands.json``;
``--readme`` writes the table into the README's performance section and the performance
guide too.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from bench_prefix import BIN, KVCACHE_SIMULATOR_RUN, TRACE, byte_compile_kvtrace
from bench_timeline_hta import HTA_RUN, KVTRACE_QUERY, hta_run, kvtrace_run, write_traces
from bench_warehouse import COPY_PROCESS, SUMMARY_MACRO, Run, machine, process, write_dsa_trace
from bench_workload import write_mooncake

HERE = Path(__file__).parent
KVTRACE = str(BIN / "kvtrace")
KVCACHE_SIMULATOR = str(BIN / "kvcache-simulator")
PY = sys.executable
AZURE_TRACE = HERE.parent / "tests" / "data" / "azure_llm_inference_code.csv"

# -- the arrival statistics (rows 4 to 6 and 9) ---------------------------------------------

# the 15 columns of workload_arrival_summary and workload_lengths that the other tools
# compute too, in the order every side prints them
ARRIVAL_STATISTICS = (
    "a.requests, a.duration_s, a.rate_per_s, a.gap_cv, a.burstiness, a.peak_to_mean, "
    "l.input_mean, l.input_p50, l.input_p90, l.input_p99, "
    "l.output_mean, l.output_p50, l.output_p90, l.output_p99, l.prefill_decode_ratio"
)
WORKLOAD_SQL = (
    f"SELECT {ARRIVAL_STATISTICS} "
    "FROM workload_arrival_summary AS a JOIN workload_lengths AS l USING (run_id)"
)
ARRIVAL_WORK = (
    "15 statistics: requests, duration, rate, gap CV, burstiness, peak-to-mean; input and "
    "output tokens' mean, p50, p90, p99; prefill:decode ratio"
)
# the same 15 over the JSONL, by workload.sql's definitions: arrival_s counted from the
# earliest arrival, gaps in arrival order, 60 s windows counted from the earliest arrival
DUCKDB_JSONL = f"""
import duckdb, json
print(json.dumps(duckdb.connect().execute('''
    WITH t AS (
        SELECT timestamp / 1000.0 AS arrival, input_length AS input, output_length AS output
        FROM read_json_auto('{TRACE}')
    ), a AS (SELECT *, arrival - min(arrival) OVER () AS arrival_s FROM t),
    g AS (SELECT *, arrival_s - lag(arrival_s) OVER (ORDER BY arrival_s) AS gap FROM a),
    s AS (
        SELECT count(*) AS requests, max(arrival_s) AS duration_s,
               avg(gap) AS gap_mean, stddev_pop(gap) AS gap_sd,
               avg(input) AS input_mean, quantile_cont(input, [0.5, 0.9, 0.99]) AS input_q,
               avg(output) AS output_mean, quantile_cont(output, [0.5, 0.9, 0.99]) AS output_q,
               sum(input) / sum(output) AS ratio
        FROM g
    ), w AS (SELECT max(n) AS busiest FROM (SELECT count(*) AS n FROM a
                                            GROUP BY floor(arrival_s / 60)))
    SELECT requests, duration_s, (requests - 1) / duration_s, gap_sd / gap_mean,
           (gap_sd - gap_mean) / (gap_sd + gap_mean),
           (busiest / 60.0) / ((requests - 1) / duration_s),
           input_mean, input_q[1], input_q[2], input_q[3],
           output_mean, output_q[1], output_q[2], output_q[3], ratio
    FROM s, w''').fetchone()))
"""
# pandas reading a trace ({read}: ``frame``, ``arrival`` in seconds, ``inputs`` and
# ``outputs``), then the same 15 statistics
PANDAS_STATISTICS = """
import json
import numpy as np
import pandas as pd
{read}
arrival_s = arrival.sort_values(ignore_index=True)
arrival_s = arrival_s - arrival_s.iloc[0]
gaps = arrival_s.diff()
requests, duration = len(arrival_s), arrival_s.iloc[-1]
rate = (requests - 1) / duration
mean, sd = gaps.mean(), gaps.std(ddof=0)
busiest = np.floor(arrival_s / 60).value_counts().max()
q = [0.5, 0.9, 0.99]
print(json.dumps([float(x) for x in [
    requests, duration, rate, sd / mean, (sd - mean) / (sd + mean), busiest / 60 / rate,
    inputs.mean(), *inputs.quantile(q), outputs.mean(), *outputs.quantile(q),
    inputs.sum() / outputs.sum()]]))
"""
PANDAS_MOONCAKE = PANDAS_STATISTICS.replace(
    "{read}",
    "frame = pd.read_json('{trace}', lines=True)\n"
    "arrival = frame['timestamp'] / 1000.0\n"
    "inputs, outputs = frame['input_length'], frame['output_length']",
)
PANDAS_AZURE = PANDAS_STATISTICS.replace(
    "{read}",
    "frame = pd.read_csv('{trace}')\n"
    "arrival = pd.to_datetime(frame['TIMESTAMP']).astype('int64') / 1e9\n"
    "inputs, outputs = frame['ContextTokens'], frame['GeneratedTokens']",
)

# -- the prefix cache (row 7) -----------------------------------------------------------------

BUDGETS_GIB = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
KVCACHE_SIMULATOR_LRU = [
    *KVCACHE_SIMULATOR_RUN,
    *("--policies", "lru", "--budgets-gib", ",".join(map(str, BUDGETS_GIB))),
]
PREFIX_CURVE = [
    *("prefix-curve", "--policy", "radix_lru", "--warmup", "0.5", "--model", "llama-3-8b"),
    *(arg for gib in BUDGETS_GIB for arg in ("--capacity-gib", str(gib))),
]

# -- the DSA summary (row 11) -----------------------------------------------------------------

DSA_STATISTICS = (
    "unique_blocks, touched_block_ratio, tokens_per_touched_block, offsets, "
    "prefix_intersection_ratio"
)
DUCKDB_SUMMARY = f"""
import duckdb, pathlib, sys
con = duckdb.connect()
con.execute({SUMMARY_MACRO!r})
print(con.execute(pathlib.Path(sys.argv[1]).read_text(), [sys.argv[2]]).fetchone())
"""


@dataclass(frozen=True)
class Row:
    """One row: the job, the other tool, what both sides compute, and the commands each
    side runs (fresh processes, one after another)."""

    job: str
    tool: str
    work: str
    theirs: list[list[str]]
    ours: list[list[str]]


def measured(commands: list[list[str]]) -> Run:
    """``commands`` run one after another, each a fresh process: wall and CPU seconds
    summed, the largest peak RSS."""
    runs = [process(command) for command in commands]
    return Run(
        sum(r.wall for r in runs), sum(r.cpu for r in runs), max(r.peak_rss_mb for r in runs)
    )


def _output(command: list[str]) -> str:
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def same_answers(theirs: list[float], ours: list[float], what: str) -> None:
    """Stop the benchmark unless the two tools agree on every answer (to 1e-9)."""
    if len(theirs) != len(ours) or not np.allclose(theirs, ours, rtol=1e-9, atol=0):
        raise SystemExit(f"the answers on {what} differ: {theirs} against kvtrace's {ours}")


def _kvtrace_answers(command: list[str], warehouse: str) -> list[float]:
    """kvtrace's arrival statistics on a new warehouse: ``command``, then ``kvtrace sql``
    unless ``command`` asked them itself (``ingest --sql``)."""
    shutil.rmtree(warehouse, ignore_errors=True)
    if "--sql" in command:
        rows = json.loads(_output([KVTRACE, "-q", "-w", warehouse, *command, "-f", "json"]))
    else:
        subprocess.run([KVTRACE, "-q", "-w", warehouse, *command], check=True, capture_output=True)
        rows = json.loads(_output([KVTRACE, "-w", warehouse, "sql", WORKLOAD_SQL, "-f", "json"]))
    (row,) = rows
    return [float(value) for value in row.values()]


def ingest_and_ask(job: str, trace: Path, fresh: str, pandas: str = PANDAS_MOONCAKE) -> list[Row]:
    """Two rows for ``job``: the ``pandas`` script's one process on ``trace`` beside
    kvtrace's two commands on a new warehouse ``fresh`` (ingest ``trace``, then ask the
    arrival statistics), and beside the one command that does both (``ingest --sql``).
    All three give the same answers (`same_answers`)."""
    theirs = [PY, "-c", pandas.format(trace=trace)]
    answers = json.loads(_output(theirs))
    same_answers(answers, _kvtrace_answers(["ingest", str(trace)], fresh), str(trace))
    one = ["ingest", str(trace), "--sql", WORKLOAD_SQL]
    same_answers(answers, _kvtrace_answers(one, fresh), f"{trace} (ingest --sql)")
    tool = "pandas: read + the same statistics"
    work = f"read the trace, then its {ARRIVAL_WORK}"
    return [
        Row(
            f"{job}: ingest, then the statistics",
            tool,
            work + " (kvtrace: `ingest` into a new warehouse, then `sql`)",
            [theirs],
            [
                ["rm", "-rf", fresh],
                [KVTRACE, "-q", "-w", fresh, "ingest", str(trace)],
                [KVTRACE, "-w", fresh, "sql", WORKLOAD_SQL],
            ],
        ),
        Row(
            f"{job}: `ingest --sql`, one command",
            tool,
            work + " (kvtrace: one `ingest --sql` into a new warehouse)",
            [theirs],
            [["rm", "-rf", fresh], [KVTRACE, "-q", "-w", fresh, *one]],
        ),
    ]


def start_up_rows(root: str) -> list[Row]:
    """Rows 1 to 3: start-up, a query, and the Python API; row 3's counts compared."""
    parquet = f"{root}/workload_requests/*/*.parquet"
    count = f"SELECT count(*) FROM read_parquet('{parquet}')"
    duckdb_count = [PY, "-c", f"import duckdb; print(duckdb.connect().sql({count!r}).fetchall())"]
    ours_count = [
        PY,
        "-c",
        f"import kvtrace; print(kvtrace.connect({root!r})"
        ".sql('SELECT count(*) FROM workload_requests').fetchall())",
    ]
    if _output(duckdb_count) != _output(ours_count):
        raise SystemExit("the counts of the warehouse's requests differ")
    return [
        Row(
            "`kvtrace --help`",
            "`kvcache-simulator --help`",
            "start-up and the help text",
            [[KVCACHE_SIMULATOR, "--help"]],
            [[KVTRACE, "--help"]],
        ),
        Row(
            '`kvtrace sql "SELECT 1"`',
            "DuckDB from Python",
            "start-up and `SELECT 1` (kvtrace: opening the Mooncake warehouse)",
            [[PY, "-c", "import duckdb; print(duckdb.sql('SELECT 1').fetchall())"]],
            [[KVTRACE, "-w", root, "sql", "SELECT 1"]],
        ),
        Row(
            "`kvtrace.connect(...)` and one query, from Python",
            "DuckDB from Python",
            "count the warehouse's 12,031 Mooncake requests (kvtrace: `workload_requests`; "
            "DuckDB: `read_parquet` of the table's files)",
            [duckdb_count],
            [ours_count],
        ),
    ]


def arrival_and_prefix_rows(root: str, fresh: str) -> list[Row]:
    """Rows 4 to 7, their answers compared: the arrival statistics of the warehouse, of
    the two traces ingested anew, and the LRU prefix curve."""
    (row,) = json.loads(_output([KVTRACE, "-w", root, "sql", WORKLOAD_SQL, "-f", "json"]))
    same_answers(
        json.loads(_output([PY, "-c", DUCKDB_JSONL])), list(row.values()), "the JSONL by DuckDB"
    )
    same_prefix_curves(root)
    return [
        Row(
            "arrival summary + lengths, Mooncake warehouse",
            "DuckDB over the JSONL",
            f"the {ARRIVAL_WORK} (kvtrace: from its warehouse; DuckDB: from the JSONL)",
            [[PY, "-c", DUCKDB_JSONL]],
            [[KVTRACE, "-w", root, "sql", WORKLOAD_SQL]],
        ),
        *ingest_and_ask("Mooncake trace", TRACE, fresh),
        *ingest_and_ask("Azure code trace", AZURE_TRACE, fresh, PANDAS_AZURE),
        Row(
            "Mooncake prefix hit curve: `prefix-curve --policy radix_lru`, 11 budgets",
            "`kvcache-simulator run --policies lru`",
            "token hit rates of an LRU radix-tree prefix cache at 11 budgets of Llama-3.1-8B's "
            "KV cache, 1-1,024 GiB (16-16,384 blocks), half the requests warm-up (kvtrace: "
            "from its warehouse; kvcache-simulator: its C++ backend from the JSONL, and its "
            "unbounded-cache ceiling)",
            [KVCACHE_SIMULATOR_LRU],
            [[KVTRACE, "-w", root, *PREFIX_CURVE]],
        ),
    ]


def same_prefix_curves(root: str) -> None:
    """Stop unless kvtrace's LRU curve on the warehouse ``root`` has kvcache-simulator's
    hit rate at every budget."""
    theirs = json.loads(_output(KVCACHE_SIMULATOR_LRU))
    reference = [point["results"]["lru"]["hitRate"] for point in theirs["points"]]
    rows = json.loads(_output([KVTRACE, "-w", root, *PREFIX_CURVE, "-f", "json"]))
    same_answers(reference, [row["hit_rate"] for row in rows], "the LRU prefix curve")


def same_rows(theirs: list[list], ours: list[list]) -> bool:
    """Rows of the same shape with the same words and numbers within 0.01."""
    if [len(row) for row in theirs] != [len(row) for row in ours]:
        return False
    pairs = [pair for a, b in zip(theirs, ours, strict=True) for pair in zip(a, b, strict=True)]
    return all(
        x == y if isinstance(x, str) or isinstance(y, str) else abs(x - y) <= 0.01 for x, y in pairs
    )


def timeline_rows(scratch: Path, fresh: str) -> list[Row]:
    """Row 8 (two rows), when HTA is installed; HTA's answers and kvtrace's compared."""
    if importlib.util.find_spec("hta") is None:
        return []
    traces = scratch / "timeline"
    write_traces(traces, ranks=1, iterations=2)
    megabytes = sum(p.stat().st_size for p in traces.iterdir()) / 1e6
    _, _, theirs = hta_run(traces)
    _, _, ours = kvtrace_run(traces, scratch / "timeline-warehouse", ingest=True)
    for key in ("temporal", "overlap_pctg", "kernel_us"):
        if not same_rows(theirs[key], ours[key]):
            raise SystemExit(f"HTA's {key} differs from kvtrace's: {theirs[key]}, {ours[key]}")
    tool = "HTA: load + the same 3"
    work = (
        "load the trace, then per rank its temporal breakdown, comm / comp overlap and GPU "
        "kernel time by type (kvtrace: `ingest` into a new warehouse, then its three "
        "timeline views; HTA: TraceAnalysis and its three breakdowns)"
    )
    hta = [[PY, "-c", HTA_RUN, str(traces)]]
    return [
        Row(
            f"profiler trace, 1 rank ({megabytes:.2f} MB): ingest + 3 analyses",
            tool,
            work,
            hta,
            [
                ["rm", "-rf", fresh],
                [KVTRACE, "-q", "-w", fresh, "ingest", str(traces)],
                [KVTRACE, "-w", fresh, "sql", KVTRACE_QUERY],
            ],
        ),
        Row(
            "profiler trace, 1 rank: `ingest --sql`, one command",
            tool,
            work.replace("then its", "then in the same command its"),
            hta,
            [
                ["rm", "-rf", fresh],
                [KVTRACE, "-q", "-w", fresh, "ingest", str(traces), "--sql", KVTRACE_QUERY],
            ],
        ),
    ]


def rows(root: str, scratch: Path, requests: int, dsa_mb: list[float]) -> list[Row]:
    """Every row asked for, answers compared where both sides print them."""
    fresh = str(scratch / "fresh")
    table = [
        *start_up_rows(root),
        *arrival_and_prefix_rows(root, fresh),
        *timeline_rows(scratch, fresh),
    ]
    if requests:
        trace = scratch / "generated.jsonl"
        write_mooncake(trace, requests, np.random.default_rng(0))
        table += ingest_and_ask(
            f"Mooncake-like {requests:,} requests ({trace.stat().st_size / 1e6:.0f} MB)",
            trace,
            fresh,
        )
    if dsa_mb:
        table += dsa_rows(scratch, dsa_mb)
    return table


def dsa_rows(scratch: Path, sizes: list[float]) -> list[Row]:
    """Rows 10 and 11: a generated DSA trace of each size (MB) ingested, and the first
    one summarised."""
    table: list[Row] = []
    for mb in sizes:
        trace = scratch / f"dsa-{mb:g}" / "block64" / "trace_steps_0_n.jsonl"
        write_dsa_trace(trace, mb)
        fresh = str(scratch / "dsa-fresh")
        copy_sql = (
            f"COPY (FROM read_json('{trace}')) TO '{scratch / 'copy.parquet'}' (FORMAT parquet)"
        )
        table.append(
            Row(
                f"ingest {trace.stat().st_size / 1e6:.0f} MB of DSA JSONL",
                "DuckDB `COPY` to Parquet",
                "read the JSONL, write its rows as Parquet (kvtrace: its dsa_steps table, "
                "and besides the per-row fill and offset histograms, checks and a Delta "
                "Lake commit)",
                [[PY, "-c", COPY_PROCESS, copy_sql]],
                [["rm", "-rf", fresh], [KVTRACE, "-q", "-w", fresh, "ingest", str(trace)]],
            )
        )
    first = scratch / f"dsa-{sizes[0]:g}" / "block64" / "trace_steps_0_n.jsonl"
    built = str(scratch / "dsa-warehouse")
    subprocess.run([KVTRACE, "-q", "-w", built, "ingest", str(first)], check=True)
    table.append(
        Row(
            "DSA summary statistics of the first trace",
            "DuckDB over the JSONL",
            "count, min, p50, p95, max and mean of 5 measures (unique blocks, touched-block "
            "ratio, tokens per touched block, offsets, prefix intersection) by dsa_summary's "
            "definitions (kvtrace: from the warehouse and the histograms its ingest stored; "
            "DuckDB: from the JSONL, `summary_over_jsonl.sql`)",
            [[PY, "-c", DUCKDB_SUMMARY, str(HERE / "summary_over_jsonl.sql"), str(first)]],
            [[KVTRACE, "-w", built, "sql", f"SELECT {DSA_STATISTICS} FROM dsa_summary"]],
        )
    )
    return table


# the decode setting of the tracer row (the performance guide's)
TRACER_SETTING = ["--layers", "8", "--prompt", "4000", "--steps", "320"]


def tracer_row(scratch: Path, rounds: int) -> dict:
    """Row 12: `bench_tracer.py`'s interleaved rounds, as a row of the table (no memory
    figures: both decodes share one process)."""
    figures = scratch / "tracer.json"
    command = [PY, str(HERE / "bench_tracer.py"), *TRACER_SETTING, "--rounds", str(rounds)]
    subprocess.run(
        [*command, "--json", str(figures)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    times = json.loads(figures.read_text())
    untraced, traced = times["untraced"], times["kvtrace"]
    return {
        "job": f"`dsa-ref` decode, {times['records']:,} (step, layer) records, traced",
        "other_tool": "the same decode untraced",
        "work": "the same decode, 8 layers, a 4,000-token prompt, 320 steps, in one process",
        "other_s": float(np.median(untraced)),
        "kvtrace_s": float(np.median(traced)),
        "other_cpu_s": None,
        "kvtrace_cpu_s": None,
        "other_rss_mb": None,
        "kvtrace_rss_mb": None,
        "ratio_per_round": [u / t for u, t in zip(untraced, traced, strict=True)],
    }


# the pages whose table --readme writes, between the markers README_TABLE finds
PAGES = (HERE.parent / "README.md", HERE.parent / "docs" / "guides" / "performance.md")
README_TABLE = re.compile(
    r"(<!-- bench_commands: start -->\n).*?(<!-- bench_commands: end -->)", re.DOTALL
)


def markdown(results: list[dict], rounds: int, floor_s: float) -> str:
    """The table of ``results``: what both sides compute, medians of wall time, CPU time
    and peak RSS, and the median of the rounds' ratios with their range."""
    lines = [
        f"Medians of {rounds} interleaved rounds on {machine()}. Both sides of a row "
        "compute the same answers (compared before the rounds where both print them); a "
        f"bare `python -c pass` takes {floor_s:.2f} s.",
        "",
        "| job | both compute | other tool | other | kvtrace | ratio (other / kvtrace), rounds |",
        "|---|---|---|---|---|---|",
    ]
    for row in results:
        ratios = row["ratio_per_round"]
        lines.append(
            f"| {row['job']} | {row['work']} | {row['other_tool']} | "
            f"{_cell(row['other_s'], row['other_cpu_s'], row['other_rss_mb'])} | "
            f"{_cell(row['kvtrace_s'], row['kvtrace_cpu_s'], row['kvtrace_rss_mb'])} | "
            f"{np.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |"
        )
    return "\n".join(lines) + "\n"


def _cell(wall: float, cpu: float | None, rss_mb: float | None) -> str:
    """``wall`` seconds, with CPU seconds and peak RSS where one process measured them."""
    if cpu is None or rss_mb is None:
        return f"{wall:.2f} s"
    return f"{wall:.2f} s ({cpu:.2f} CPU-s), {rss_mb:,.0f} MB"


def result(row: Row, other: list[Run], ours: list[Run]) -> dict:
    """The figures of ``row``: medians of its rounds, and each round's ratio."""
    theirs_median, ours_median = Run.median(other), Run.median(ours)
    return {
        "job": row.job,
        "other_tool": row.tool,
        "work": row.work,
        "other_s": theirs_median.wall,
        "kvtrace_s": ours_median.wall,
        "other_cpu_s": theirs_median.cpu,
        "kvtrace_cpu_s": ours_median.cpu,
        "other_rss_mb": theirs_median.peak_rss_mb,
        "kvtrace_rss_mb": ours_median.peak_rss_mb,
        "ratio_per_round": [o.wall / k.wall for o, k in zip(other, ours, strict=True)],
    }


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--requests", type=int, default=0, help="add row 9 on a generated trace of N requests"
    )
    parser.add_argument(
        "--dsa-mb",
        type=float,
        nargs="+",
        default=[],
        help="add row 10 for a DSA trace of each size (MB) and row 11 on the first",
    )
    parser.add_argument(
        "--tracer", action="store_true", help="add row 12, the tracer's overhead (needs torch)"
    )
    parser.add_argument(
        "--readme",
        action="store_true",
        help="write the table into the README and the performance guide as well",
    )
    return parser.parse_args()


def main() -> None:
    args = arguments()
    byte_compile_kvtrace()
    scratch = Path(tempfile.mkdtemp(prefix="kvtrace-bench-commands-"))
    try:
        root = str(scratch / "warehouse")
        subprocess.run([KVTRACE, "-q", "-w", root, "ingest", str(TRACE)], check=True)
        table = rows(root, scratch, args.requests, args.dsa_mb)
        runs: dict[str, tuple[list[Run], list[Run]]] = {row.job: ([], []) for row in table}
        floor: list[float] = []
        for _ in range(args.rounds):
            floor.append(process([PY, "-c", "pass"]).wall)
            for row in table:
                runs[row.job][0].append(measured(row.theirs))
                runs[row.job][1].append(measured(row.ours))
        tracer = tracer_row(scratch, args.rounds) if args.tracer else None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results = [result(row, *runs[row.job]) for row in table]
    if tracer is not None:
        results.append(tracer)
    text = markdown(results, args.rounds, float(np.median(floor)))
    print(text)
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "commands.json").write_text(
        json.dumps({"machine": machine(), "rounds": args.rounds, "rows": results}, indent=2)
    )
    if args.readme:
        for page in PAGES:
            found = README_TABLE.search(page.read_text())
            if found is None:
                raise SystemExit(f"{page.name} has no bench_commands markers")
            page.write_text(README_TABLE.sub(lambda m: m[1] + text + m[2], page.read_text()))


if __name__ == "__main__":
    main()
