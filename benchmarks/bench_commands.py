"""Whole-process benchmark: kvtrace commands as a user runs them, each beside the tool a
user would reach for instead, every pair measured in the same round, rounds interleaved.

    python benchmarks/bench_commands.py [--rounds 5] [--requests 1000000]
                                        [--dsa-mb 233 [466 932]] [--tracer] [--readme]

Rows (each a fresh process on each side, under GNU time: wall and CPU seconds, peak RSS):

1. ``kvtrace --help``, beside a bare ``python -c pass`` (the interpreter's own floor);
2. ``kvtrace sql "SELECT 1"``, beside DuckDB answering the same from Python;
3. ``kvtrace.connect(...)`` from Python and one count of the Mooncake warehouse's
   requests, beside DuckDB's ``SELECT 1`` from Python (imports included);
4. ``kvtrace sql`` of a run's arrival summary and request lengths (one statement) on the
   Mooncake conversation trace's warehouse, beside DuckDB reading the trace's JSONL for
   the same answers;
5. the Mooncake trace ingested into a new warehouse and those questions asked, as two
   commands and as one (``ingest --sql``), beside pandas reading the JSONL and computing
   them (one process);
6. the same for the Azure code trace (8,819 requests, CSV), beside pandas' ``read_csv``;
7. the LRU prefix hit curve at 11 capacities (``workload_prefix_hit_curve``, radix_lru,
   prefix semantics, token weight, warm-up 0.5), beside ``kvcache-simulator run``'s
   sweep of the same trace (which computes three policies at 13 budgets; its own floor);
8. a one-rank profiler trace (0.45 MB, `bench_timeline_hta.write_traces`) ingested and
   its three analyses asked (two commands, and one), beside HTA loading it and running
   the same three (when HTA is installed);
9. with ``--requests N``, the two rows of 5 again on a generated Mooncake-like trace of N requests
   (``bench_workload.write_mooncake``: conversations that extend their earlier turns);
10. with ``--dsa-mb M [M ...]``, a generated seed-format DSA trace of each size M MB
    ingested by ``kvtrace ingest``, beside a Python process running DuckDB's
    ``COPY (FROM read_json(...)) TO parquet`` (several sizes show how peak memory grows);
11. and the first trace's ``dsa_summary`` from a fresh ``kvtrace sql``, beside DuckDB
    computing the same statistics over the JSONL (``summary_over_jsonl.sql``);
12. with ``--tracer``, the overhead of the DSA tracer on decode: ``bench_tracer.py``'s
    untraced and traced ``dsa-ref`` decodes (8 layers, a 4,000-token prompt, 320 steps),
    interleaved in one process for the same number of rounds, the ratio taken within
    each round (decode alone: a process's start-up and prefill would hide it).

On the arrival traces the answers of both sides are compared before the rounds (the
benchmark stops when they differ).  Prints a Markdown table of medians, with the spread
of the rounds' ratios and the machine described, and writes
``benchmarks/out/commands.json``; ``--readme`` writes the table into the README's
performance section and the performance guide too.
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
from pathlib import Path

import numpy as np
from bench_prefix import BIN, KVCACHE_SIMULATOR_RUN, TRACE
from bench_timeline_hta import HTA_RUN, KVTRACE_QUERY, write_traces
from bench_warehouse import COPY_PROCESS, SUMMARY_MACRO, Run, machine, process, write_dsa_trace
from bench_workload import write_mooncake

HERE = Path(__file__).parent
KVTRACE = str(BIN / "kvtrace")
PY = sys.executable
AZURE_TRACE = HERE.parent / "tests" / "data" / "azure_llm_inference_code.csv"
CAPACITIES = "[16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]"
# the two usual questions of an arrival trace, asked in one statement: the arrival
# process (requests, mean rate, inter-arrival CV) and the request lengths
WORKLOAD_SQL = (
    "SELECT a.requests, a.rate_per_s, a.gap_cv, l.input_mean, l.input_p90, l.output_mean "
    "FROM workload_arrival_summary AS a JOIN workload_lengths AS l USING (run_id)"
)
DUCKDB_JSONL = f"""
import duckdb, json
con = duckdb.connect()
con.sql("CREATE VIEW t AS SELECT * FROM read_json_auto('{TRACE}')")
print(json.dumps(con.execute('''
    WITH a AS (SELECT timestamp / 1000.0 AS arrival FROM t),
         g AS (SELECT arrival, arrival - lag(arrival) OVER (ORDER BY arrival) AS gap FROM a)
    SELECT (SELECT count(*) FROM t),
           (count(*) - 1) / (max(arrival) - min(arrival)), stddev_pop(gap) / avg(gap),
           (SELECT avg(input_length) FROM t), (SELECT quantile_cont(input_length, 0.9) FROM t),
           (SELECT avg(output_length) FROM t)
    FROM g''').fetchone()))
"""
DUCKDB_SUMMARY = f"""
import duckdb, pathlib, sys
con = duckdb.connect()
con.execute({SUMMARY_MACRO!r})
print(con.execute(pathlib.Path(sys.argv[1]).read_text(), [sys.argv[2]]).fetchone())
"""
PANDAS_MOONCAKE = """
import json
import pandas as pd
frame = pd.read_json('{trace}', lines=True)
arrival = frame['timestamp'].sort_values() / 1000.0
gaps = arrival.diff().dropna()
span = arrival.iloc[-1] - arrival.iloc[0]
inputs = frame['input_length']
print(json.dumps([len(frame), (len(frame) - 1) / span, gaps.std(ddof=0) / gaps.mean(),
                  inputs.mean(), inputs.quantile(0.9), frame['output_length'].mean()]))
"""
PANDAS_AZURE = """
import json
import pandas as pd
frame = pd.read_csv('{trace}')
arrival = pd.to_datetime(frame['TIMESTAMP']).astype('int64').sort_values() / 1e9
gaps = arrival.diff().dropna()
span = arrival.iloc[-1] - arrival.iloc[0]
inputs = frame['ContextTokens']
print(json.dumps([len(frame), (len(frame) - 1) / span, gaps.std(ddof=0) / gaps.mean(),
                  inputs.mean(), inputs.quantile(0.9), frame['GeneratedTokens'].mean()]))
"""


def measured(commands: list[list[str]]) -> Run:
    """``commands`` run one after another, each a fresh process: wall and CPU seconds
    summed, the largest peak RSS."""
    runs = [process(command) for command in commands]
    return Run(
        sum(r.wall for r in runs), sum(r.cpu for r in runs), max(r.peak_rss_mb for r in runs)
    )


Row = tuple[str, str, list[list[str]], list[list[str]]]


def ingest_and_ask(job: str, trace: Path, fresh: str, pandas: str = PANDAS_MOONCAKE) -> list[Row]:
    """Two rows for ``job``: the ``pandas`` script's one process on ``trace`` beside
    kvtrace's two commands on a new warehouse ``fresh`` (ingest ``trace``, then ask the
    two workload questions), and beside the one command that does both (``ingest
    --sql``).  All three give the same answers (`same_answers`)."""
    theirs = [PY, "-c", pandas.format(trace=trace)]
    answers = json.loads(_output(theirs))
    same_answers(answers, _kvtrace_answers(["ingest", str(trace)], fresh), str(trace))
    one = ["ingest", str(trace), "--sql", WORKLOAD_SQL]
    same_answers(answers, _kvtrace_answers(one, fresh), f"{trace} (ingest --sql)")
    tool = "pandas read + the same aggregates"
    return [
        (
            f"{job}: ingest, then the 2 queries",
            tool,
            [theirs],
            [
                ["rm", "-rf", fresh],
                [KVTRACE, "-q", "-w", fresh, "ingest", str(trace)],
                [KVTRACE, "-w", fresh, "sql", WORKLOAD_SQL],
            ],
        ),
        (
            f"{job}: `ingest --sql`, one command",
            tool,
            [theirs],
            [["rm", "-rf", fresh], [KVTRACE, "-q", "-w", fresh, *one]],
        ),
    ]


def _output(command: list[str]) -> str:
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def _kvtrace_answers(command: list[str], warehouse: str) -> list[float]:
    """kvtrace's answers to the workload questions on a new warehouse: ``command``, then
    ``kvtrace sql`` unless ``command`` asked them itself (``ingest --sql``)."""
    shutil.rmtree(warehouse, ignore_errors=True)
    if "--sql" in command:
        rows = json.loads(_output([KVTRACE, "-q", "-w", warehouse, *command, "-f", "json"]))
    else:
        subprocess.run([KVTRACE, "-q", "-w", warehouse, *command], check=True, capture_output=True)
        rows = json.loads(_output([KVTRACE, "-w", warehouse, "sql", WORKLOAD_SQL, "-f", "json"]))
    (row,) = rows
    return [float(value) for value in row.values()]


def same_answers(theirs: list[float], ours: list[float], what: str) -> None:
    """Stop the benchmark unless the two tools agree on every answer (to 1e-9)."""
    if not np.allclose(theirs, ours, rtol=1e-9, atol=0):
        raise SystemExit(f"the answers on {what} differ: {theirs} against kvtrace's {ours}")


def rows(root: str, scratch: Path, requests: int, dsa_mb: list[float]) -> list[Row]:
    """(job, other tool, its commands, kvtrace's commands) for each row."""
    fresh = str(scratch / "fresh")
    (row,) = json.loads(_output([KVTRACE, "-w", root, "sql", WORKLOAD_SQL, "-f", "json"]))
    same_answers(
        json.loads(_output([PY, "-c", DUCKDB_JSONL])), list(row.values()), "the JSONL by DuckDB"
    )
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
        *ingest_and_ask("Mooncake trace", TRACE, fresh),
        *ingest_and_ask("Azure code trace", AZURE_TRACE, fresh, PANDAS_AZURE),
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
    if importlib.util.find_spec("hta") is not None:
        traces = scratch / "timeline"
        write_traces(traces, ranks=1, iterations=2)
        megabytes = sum(p.stat().st_size for p in traces.iterdir()) / 1e6
        table.append(
            (
                f"profiler trace, 1 rank ({megabytes:.2f} MB): ingest + 3 analyses",
                "HTA: load + the same 3",
                [[PY, "-c", HTA_RUN, str(traces)]],
                [
                    ["rm", "-rf", fresh],
                    [KVTRACE, "-q", "-w", fresh, "ingest", str(traces)],
                    [KVTRACE, "-w", fresh, "sql", KVTRACE_QUERY],
                ],
            )
        )
        table.append(
            (
                "profiler trace, 1 rank: `ingest --sql`, one command",
                "HTA: load + the same 3",
                [[PY, "-c", HTA_RUN, str(traces)]],
                [
                    ["rm", "-rf", fresh],
                    [KVTRACE, "-q", "-w", fresh, "ingest", str(traces), "--sql", KVTRACE_QUERY],
                ],
            )
        )
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
            (
                f"ingest {trace.stat().st_size / 1e6:.0f} MB of DSA JSONL",
                "DuckDB `COPY` to Parquet",
                [[PY, "-c", COPY_PROCESS, copy_sql]],
                [["rm", "-rf", fresh], [KVTRACE, "-q", "-w", fresh, "ingest", str(trace)]],
            )
        )
    first = scratch / f"dsa-{sizes[0]:g}" / "block64" / "trace_steps_0_n.jsonl"
    built = str(scratch / "dsa-warehouse")
    subprocess.run([KVTRACE, "-q", "-w", built, "ingest", str(first)], check=True)
    table.append(
        (
            "DSA summary statistics of the first trace",
            "DuckDB over the JSONL",
            [[PY, "-c", DUCKDB_SUMMARY, str(HERE / "summary_over_jsonl.sql"), str(first)]],
            [[KVTRACE, "-w", built, "sql", "SELECT * FROM dsa_summary"]],
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


def markdown(results: list[dict], rounds: int) -> str:
    """The table of ``results``: medians of wall time, CPU time and peak RSS, and the
    median of the rounds' ratios with their range."""
    lines = [
        f"Medians of {rounds} interleaved rounds on {machine()}.",
        "",
        "| job | other tool | other | kvtrace | ratio (other / kvtrace), rounds |",
        "|---|---|---|---|---|",
    ]
    for row in results:
        ratios = row["ratio_per_round"]
        lines.append(
            f"| {row['job']} | {row['other_tool']} | "
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


def main() -> None:
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
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="kvtrace-bench-commands-"))
    try:
        root = str(scratch / "warehouse")
        subprocess.run([KVTRACE, "-q", "-w", root, "ingest", str(TRACE)], check=True)
        table = rows(root, scratch, args.requests, args.dsa_mb)
        runs: dict[str, dict[str, list[Run]]] = {
            job: {"other": [], "kvtrace": []} for job, *_ in table
        }
        for _ in range(args.rounds):
            for job, _tool, theirs, ours in table:
                runs[job]["other"].append(measured(theirs))
                runs[job]["kvtrace"].append(measured(ours))
        tracer = tracer_row(scratch, args.rounds) if args.tracer else None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results = []
    for job, tool, *_ in table:
        other, ours = Run.median(runs[job]["other"]), Run.median(runs[job]["kvtrace"])
        ratios = [
            o.wall / k.wall for o, k in zip(runs[job]["other"], runs[job]["kvtrace"], strict=True)
        ]
        results.append(
            {
                "job": job,
                "other_tool": tool,
                "other_s": other.wall,
                "kvtrace_s": ours.wall,
                "other_cpu_s": other.cpu,
                "kvtrace_cpu_s": ours.cpu,
                "other_rss_mb": other.peak_rss_mb,
                "kvtrace_rss_mb": ours.peak_rss_mb,
                "ratio_per_round": ratios,
            }
        )
    if tracer is not None:
        results.append(tracer)
    text = markdown(results, args.rounds)
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
