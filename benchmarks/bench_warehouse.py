"""Warehouse benchmark: kvtrace against DuckDB working straight on the JSONL, in one run.

    python benchmarks/bench_warehouse.py --mb 300

Generates a seed-format DSA trace (61 layers, 2048 positions a row, synthetic), then
measures side by side:

1. ingest: ``ingest()`` vs DuckDB ``COPY (FROM read_json(...)) TO parquet`` in this
   process, and the ``kvtrace ingest`` command vs a Python process running the COPY
   (wall and CPU seconds, peak RSS, from GNU time), interleaved for ``--rounds`` rounds
   (medians, with the spread of the ratio);
2. storage: warehouse bytes vs JSONL bytes;
3. the ``dsa_summary`` query vs the same statistics computed by DuckDB over the JSONL;
4. re-binning to block size 16 on one thread: ``dsa_blocks(16)`` vs DuckDB list lambdas.

Prints a Markdown table and writes the figures as JSON to ``benchmarks/out/``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np

import kvtrace
from kvtrace import connect
from kvtrace.ingest import ingest
from kvtrace.synthetic import write_seed_trace
from kvtrace.warehouse import Warehouse

HERE = Path(__file__).parent
ROW_BYTES_AT_12K = 14_000  # JSONL bytes of one 2048-position record at ~12k context


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{cpu}, {os.cpu_count()} cores, {memory:.0f} GiB RAM, Python "
        f"{platform.python_version()}, DuckDB {duckdb.__version__}, kvtrace "
        f"{kvtrace.__version__}"
    )


COPY_PROCESS = "import duckdb, sys; duckdb.connect().execute(sys.argv[1])"
# the statistics macro that summary_over_jsonl.sql calls
SUMMARY_MACRO = (
    "CREATE MACRO _s(x) AS {'count': count(x), 'min': min(x), "
    "'p50': quantile_cont(x, 0.5), 'p95': quantile_cont(x, 0.95), "
    "'max': max(x), 'mean': avg(x)}"
)
KVTRACE = str(Path(sys.executable).with_name("kvtrace"))


@dataclass
class Run:
    """One fresh process: wall and CPU seconds, peak RSS."""

    wall: float
    cpu: float
    peak_rss_mb: float

    @staticmethod
    def median(runs: list[Run]) -> Run:
        return Run(
            float(np.median([r.wall for r in runs])),
            float(np.median([r.cpu for r in runs])),
            float(np.median([r.peak_rss_mb for r in runs])),
        )


def process(command: list[str]) -> Run:
    """Run ``command`` as a fresh process under GNU time (a child forked from this
    process would count this process's memory as its own)."""
    start = time.perf_counter()
    done = subprocess.run(
        ["/usr/bin/time", "-f", "%U %S %M", *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wall = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr}")
    user, system, rss_kb = done.stderr.split()[-3:]
    return Run(wall, float(user) + float(system), int(rss_kb) / 1024)


def timed(work) -> tuple[float, object]:
    start = time.perf_counter()
    result = work()
    return time.perf_counter() - start, result


def best_of(runs: int, work) -> float:
    return min(timed(work)[0] for _ in range(runs))


def write_dsa_trace(trace: Path, mb: float) -> int:
    """Write a seed-format DSA trace of about ``mb`` MB at ``trace`` (61 layers, 16 steps
    a request, 2048 positions a row), unless one of that size is there; returns its rows."""
    steps = 16
    requests = max(1, int(mb * 1e6 / ROW_BYTES_AT_12K) // (61 * steps))
    rows = requests * steps * 61
    if trace.exists() and trace.read_bytes().count(b"\n") == rows:
        print(f"reusing {trace}")
        return rows
    trace.parent.mkdir(parents=True, exist_ok=True)
    gen_s, _ = timed(
        lambda: write_seed_trace(
            trace,
            requests=requests,
            steps=steps,
            layers=61,
            topk=2048,
            prompt_tokens=12000,
            run_name="bench",
            dataset="synthetic-bench",
        )
    )
    print(f"generated {rows:,} rows in {gen_s:.0f} s")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=300, help="JSONL size to generate (MB)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="Interleaved COPY / ingest rounds (medians are reported)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="Folder for the trace and the warehouses (default: a new temp)",
    )
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="kvtrace-bench-"))
    trace = work / "bench" / "block64" / "trace_steps_0_n.jsonl"
    shutil.rmtree(work / "wh", ignore_errors=True)
    (work / "duckdb_copy.parquet").unlink(missing_ok=True)

    rows = write_dsa_trace(trace, args.mb)
    jsonl_bytes = trace.stat().st_size
    positions = rows * 2048

    # 1. ingest vs DuckDB COPY, in this process and as fresh processes, interleaved round
    # by round so that a noisy stretch of the machine lands on both
    duck_parquet = work / "duckdb_copy.parquet"
    copy_sql = f"COPY (FROM read_json('{trace}')) TO '{duck_parquet}' (FORMAT parquet)"
    copy_times, ingest_times, copy_runs, ingest_runs = [], [], [], []
    for round_no in range(args.rounds):
        copy_times.append(timed(lambda: duckdb.connect().execute(copy_sql))[0])
        shutil.rmtree(work / "wh", ignore_errors=True)
        warehouse = Warehouse(work / "wh", create=True)
        seconds, report = timed(lambda wh=warehouse: ingest(wh, [str(trace)]))
        assert report.rows == rows and report.rejected == 0
        ingest_times.append(seconds)
        copy_runs.append(process([sys.executable, "-c", COPY_PROCESS, copy_sql]))
        shutil.rmtree(work / "wh-cmd", ignore_errors=True)
        ingest_runs.append(
            process([KVTRACE, "-q", "-w", str(work / "wh-cmd"), "ingest", str(trace)])
        )
        print(
            f"round {round_no + 1}: in process COPY {copy_times[-1]:.1f} s, ingest "
            f"{seconds:.1f} s; as processes COPY {copy_runs[-1].wall:.1f} s, "
            f"kvtrace ingest {ingest_runs[-1].wall:.1f} s"
        )
    shutil.rmtree(work / "wh-cmd")
    ratios = [c / i for c, i in zip(copy_times, ingest_times, strict=True)]
    command_ratios = [c.wall / i.wall for c, i in zip(copy_runs, ingest_runs, strict=True)]
    copy_s, ingest_s = float(np.median(copy_times)), float(np.median(ingest_times))
    copy_run, ingest_run = Run.median(copy_runs), Run.median(ingest_runs)

    # 2. bytes
    warehouse_bytes = sum(warehouse.snapshot().files["bytes"].to_pylist())

    # 3. summary
    con = connect(warehouse)
    summary_s = best_of(3, lambda: con.execute("SELECT * FROM dsa_summary").fetchall())
    baseline = duckdb.connect()
    baseline.execute(SUMMARY_MACRO)
    summary_sql = (HERE / "summary_over_jsonl.sql").read_text()
    jsonl_summary_s, jsonl_summary = timed(
        lambda: baseline.execute(summary_sql, [str(trace)]).fetchone()
    )
    ours = con.execute(
        "SELECT unique_blocks, touched_block_ratio, tokens_per_touched_block, "
        "offsets, prefix_intersection_ratio FROM dsa_summary"
    ).fetchone()
    for a, b in zip(ours, jsonl_summary, strict=True):
        for key in a:
            assert np.isclose(float(a[key]), float(b[key]), rtol=1e-9), (key, a, b)

    # 4. re-binning, one thread each
    con.execute("SET threads = 1")
    rebin_s = best_of(
        3,
        lambda: con.execute(
            "SELECT sum(unique_blocks), avg(tokens_per_block_p95) FROM dsa_blocks(16)"
        ).fetchall(),
    )
    lambda_con = duckdb.connect()
    lambda_con.execute("SET threads = 1")
    steps_files = [warehouse.uri(p) for p in warehouse.files("dsa_steps")]
    lambda_s = best_of(
        1,
        lambda: lambda_con.execute(
            "SELECT sum(len(list_distinct(list_transform(selected_pos, lambda p: p // 16)))) "
            "FROM read_parquet(?)",
            [steps_files],
        ).fetchall(),
    )

    figures = {
        "machine": machine(),
        "rows": rows,
        "positions": positions,
        "jsonl_mb": jsonl_bytes / 1e6,
        "ingest_mb_s": jsonl_bytes / 1e6 / ingest_s,
        "duckdb_copy_mb_s": jsonl_bytes / 1e6 / copy_s,
        "ingest_vs_copy": float(np.median(ratios)),
        "ingest_vs_copy_range": [min(ratios), max(ratios)],
        "rounds": args.rounds,
        "command_copy_s": copy_run.wall,
        "command_ingest_s": ingest_run.wall,
        "command_ingest_vs_copy": float(np.median(command_ratios)),
        "command_ingest_vs_copy_range": [min(command_ratios), max(command_ratios)],
        "command_copy_cpu_s": copy_run.cpu,
        "command_ingest_cpu_s": ingest_run.cpu,
        "command_cpu_ratio": ingest_run.cpu / copy_run.cpu,
        "command_copy_peak_rss_mb": copy_run.peak_rss_mb,
        "ingest_peak_rss_mb": ingest_run.peak_rss_mb,
        "warehouse_mb": warehouse_bytes / 1e6,
        "duckdb_copy_parquet_mb": duck_parquet.stat().st_size / 1e6,
        "warehouse_fraction_of_jsonl": warehouse_bytes / jsonl_bytes,
        "summary_s": summary_s,
        "summary_over_jsonl_s": jsonl_summary_s,
        "summary_speedup": jsonl_summary_s / summary_s,
        "rebin16_mpos_s_one_core": positions / rebin_s / 1e6,
        "lambda_rebin16_mpos_s_one_core": positions / lambda_s / 1e6,
        "rebin_speedup": lambda_s / rebin_s,
    }
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "bench_warehouse.json").write_text(json.dumps(figures, indent=2))
    print(f"\nMachine: {figures['machine']}")
    print(f"Trace: {rows:,} rows x 2048 positions, {figures['jsonl_mb']:.0f} MB of JSONL\n")
    print("| measure | kvtrace | baseline (DuckDB on the JSONL) | ratio |")
    print("|---|---|---|---|")
    print(
        f"| ingest | {figures['ingest_mb_s']:.0f} MB/s | COPY to Parquet "
        f"{figures['duckdb_copy_mb_s']:.0f} MB/s | {figures['ingest_vs_copy']:.2f}x "
        f"(median of {args.rounds} interleaved rounds, {min(ratios):.2f}-{max(ratios):.2f}) |"
    )
    print(
        f"| `kvtrace ingest` as a command | {ingest_run.wall:.2f} s | a DuckDB COPY process "
        f"{copy_run.wall:.2f} s | {figures['command_ingest_vs_copy']:.2f}x "
        f"({min(command_ratios):.2f}-{max(command_ratios):.2f}) |"
    )
    print(
        f"| CPU seconds of the command | {ingest_run.cpu:.2f} s | {copy_run.cpu:.2f} s | "
        f"{figures['command_cpu_ratio']:.2f}x as much |"
    )
    print(
        f"| peak RSS of the command | {ingest_run.peak_rss_mb:.0f} MB | "
        f"{copy_run.peak_rss_mb:.0f} MB | |"
    )
    print(
        f"| storage | {figures['warehouse_mb']:.1f} MB | JSONL {figures['jsonl_mb']:.0f} MB "
        f"(DuckDB's Parquet {figures['duckdb_copy_parquet_mb']:.0f} MB) | "
        f"1/{1 / figures['warehouse_fraction_of_jsonl']:.1f} |"
    )
    print(
        f"| dsa_summary | {summary_s * 1000:.0f} ms | {jsonl_summary_s:.1f} s | "
        f"{figures['summary_speedup']:.0f}x |"
    )
    print(
        f"| re-bin to 16, 1 thread | {figures['rebin16_mpos_s_one_core']:.0f} M pos/s | "
        f"list lambdas {figures['lambda_rebin16_mpos_s_one_core']:.0f} M pos/s | "
        f"{figures['rebin_speedup']:.1f}x |"
    )


if __name__ == "__main__":
    main()
