"""Batch queries over many runs: a warehouse of ``--runs`` small collected DSA runs (and
as many small workload traces), ingested one file per commit, asked ``dsa_summary`` and a
workload query across all of them as fresh ``kvtrace sql`` processes, right after the
ingest (whose commits compact the tables as they go) and after ``kvtrace optimize``.

    python benchmarks/bench_many_runs.py [--runs 1000] [--rounds 3] [--auto-compact N]

``--auto-compact`` sets ``KVTRACE_AUTO_COMPACT`` for the ingest (the small files a table
gathers before a commit compacts it; 0: never, as before kvtrace compacted after
commits).  Reports the ingest time, the Delta log of the busiest table (commits since
its last checkpoint) and the journal's (with the files it lists), the data files (those
the queries read, and all on disk), the first query's wall time after the ingest and
after optimize, and the two queries' wall time (medians), before and after optimize.
Writes ``benchmarks/out/many_runs.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_warehouse import machine
from deltalake import DeltaTable

from kvtrace.ingest import ingest
from kvtrace.synthetic import write_seed_trace
from kvtrace.warehouse import Warehouse

HERE = Path(__file__).parent
KVTRACE = str(Path(sys.executable).parent / "kvtrace")
AUTO_COMPACT_ENV = "KVTRACE_AUTO_COMPACT"  # small files a table gathers before compaction
QUERIES = {
    "dsa_summary": "SELECT count(*), avg(unique_blocks.mean) FROM dsa_summary",
    "workload": "SELECT count(*), avg(rate_per_s) FROM workload_arrival_summary",
}


def write_runs(folder: Path, runs: int) -> list[Path]:
    """``runs`` small DSA traces and as many 20-request Mooncake-format traces."""
    paths = []
    for i in range(runs):
        trace = folder / f"run{i:04d}" / "block64" / "trace_steps_0_4.jsonl"
        trace.parent.mkdir(parents=True)
        write_seed_trace(
            trace,
            requests=2,
            steps=2,
            layers=2,
            topk=64,
            prompt_tokens=512,
            run_name=f"run{i:04d}",
            seed=i,
        )
        workload = folder / f"workload{i:04d}.jsonl"
        workload.write_text(
            "".join(
                json.dumps(
                    {
                        "timestamp": 100 * r,
                        "input_length": 1000 + r,
                        "output_length": 50,
                        "hash_ids": [i, i + 1, r],
                    }
                )
                + "\n"
                for r in range(20)
            )
        )
        paths += [trace, workload]
    return paths


def log_state(root: Path, table: str) -> dict:
    """Commits in the table's log since its last checkpoint, and its checkpoints."""
    log = root / table / "_delta_log"
    commits = sorted(int(p.stem) for p in log.glob("*.json") if p.stem.isdigit())
    checkpoints = sorted(int(p.name.split(".")[0]) for p in log.glob("*.checkpoint.parquet"))
    last = checkpoints[-1] if checkpoints else -1
    return {
        "commits": len(commits),
        "checkpoints": len(checkpoints),
        "commits_since_checkpoint": sum(1 for c in commits if c > last),
        "files_listed": len(DeltaTable(str(root / table)).file_uris()),
    }


def data_files(root: Path) -> dict[str, float]:
    """Data files the queries read (the warehouse version's), and all on disk (those
    that compaction replaced stay until ``kvtrace vacuum``); with the wall time of this,
    the first query after the commits (it reads the snapshot the last command kept)."""
    start = time.perf_counter()
    shown = subprocess.run(
        [KVTRACE, "-w", str(root), "sql", "SELECT count(*) FROM warehouse_files", "-f", "csv"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    first_query_s = time.perf_counter() - start
    on_disk = sum(
        1
        for p in root.rglob("*.parquet")
        if "_delta_log" not in p.parts and "_schema" not in p.parts
    )
    return {"read": int(shown.splitlines()[1]), "on_disk": on_disk, "first_query_s": first_query_s}


def query_times(root: str, rounds: int) -> dict:
    times: dict[str, list[float]] = {name: [] for name in QUERIES}
    for _ in range(rounds):
        for name, sql in QUERIES.items():
            start = time.perf_counter()
            subprocess.run([KVTRACE, "-w", root, "sql", sql], check=True, capture_output=True)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--auto-compact",
        type=int,
        default=None,
        help=f"{AUTO_COMPACT_ENV} for the ingest (default: as set, else kvtrace's own)",
    )
    args = parser.parse_args()
    if args.auto_compact is not None:
        os.environ[AUTO_COMPACT_ENV] = str(args.auto_compact)
    scratch = Path(tempfile.mkdtemp(prefix="kvtrace-bench-runs-"))
    try:
        paths = write_runs(scratch / "traces", args.runs)
        root = scratch / "warehouse"
        warehouse = Warehouse(str(root), create=True)
        start = time.perf_counter()
        ingest(warehouse, [str(p) for p in paths])
        ingest_s = time.perf_counter() - start
        before = {
            "log": log_state(root, "dsa_steps"),
            "journal": log_state(root, "_commits"),
            "data_files": data_files(root),
            "query_s": query_times(str(root), args.rounds),
        }
        start = time.perf_counter()
        subprocess.run([KVTRACE, "-q", "-w", str(root), "optimize"], check=True)
        optimize_s = time.perf_counter() - start
        after = {
            "data_files": data_files(root),
            "query_s": query_times(str(root), args.rounds),
        }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result = {
        "machine": machine(),
        "runs": args.runs,
        "auto_compact": os.environ.get(AUTO_COMPACT_ENV, "kvtrace's default"),
        "ingest_s": ingest_s,
        "optimize_s": optimize_s,
        "before_optimize": before,
        "after_optimize": after,
    }
    print(json.dumps(result, indent=2))
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "many_runs.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
