"""Workload benchmark: arrival-trace ingest against DuckDB, and the prefix-reuse curve.

    python benchmarks/bench_workload.py --requests 1000000 --rounds 3

Generates an Azure-format CSV and a Mooncake-format JSONL of ``--requests`` requests
(Mooncake-like prefix sharing: conversations that extend their earlier turns' block
hashes), then measures side by side, interleaved round by round:

1. ingest: ``kvtrace ingest`` against DuckDB ``COPY (FROM read_csv / read_json) TO parquet``;
2. the LRU and OPT prefix-cache curves (``workload_prefix_hit_curve``) on the JSONL.

Prints a Markdown table and writes the figures as JSON to ``benchmarks/out/``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np

from kvtrace import connect
from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse

HERE = Path(__file__).parent


def write_azure(path: Path, requests: int, rng: np.random.Generator) -> None:
    gaps = rng.exponential(0.4, requests)
    stamps = np.datetime64("2023-11-16T18:00:00") + (np.cumsum(gaps) * 1e7).astype(
        "timedelta64[100ns]"
    )
    context = rng.integers(1, 8000, requests)
    generated = rng.integers(1, 500, requests)
    with open(path, "w") as out:
        out.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for stamp, c, g in zip(stamps, context, generated, strict=True):
            out.write(f"{str(stamp).replace('T', ' ')},{c},{g}\n")


def write_mooncake(path: Path, requests: int, rng: np.random.Generator) -> None:
    """Conversations of a few turns: each turn re-reads its conversation's blocks and adds
    new ones, as Mooncake's conversation trace does."""
    next_id = 0
    open_conversations: list[list[int]] = []
    clock = 0.0
    with open(path, "w") as out:
        for _ in range(requests):
            clock += rng.exponential(300.0)
            if open_conversations and rng.random() < 0.6:
                blocks = open_conversations[rng.integers(len(open_conversations))]
            else:
                blocks = [0]  # a shared system prompt
                open_conversations.append(blocks)
                if len(open_conversations) > 2000:
                    open_conversations.pop(0)
            added = int(rng.integers(1, 12))
            blocks.extend(range(next_id + 1, next_id + 1 + added))
            next_id += added
            record = {
                "timestamp": int(clock),
                "input_length": len(blocks) * 512 - 100,
                "output_length": int(rng.integers(10, 800)),
                "hash_ids": blocks,
            }
            out.write(json.dumps(record) + "\n")


def timed(work) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="kvtrace-bench-workload-"))
    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    azure, mooncake = work / "azure.csv", work / "mooncake.jsonl"
    if not azure.exists():
        write_azure(azure, args.requests, rng)
    if not mooncake.exists():
        write_mooncake(mooncake, args.requests // 10, rng)
    times: dict[str, list[float]] = {
        k: [] for k in ("kvtrace_csv", "duckdb_csv", "kvtrace_jsonl", "duckdb_jsonl", "lru", "opt")
    }
    for round_no in range(args.rounds):
        times["duckdb_csv"].append(
            timed(
                lambda: duckdb.connect().execute(
                    f"COPY (FROM read_csv('{azure}')) TO '{work}/azure.parquet' (FORMAT parquet)"
                )
            )
        )
        shutil.rmtree(work / "wh", ignore_errors=True)
        warehouse = Warehouse(work / "wh", create=True)
        times["kvtrace_csv"].append(timed(lambda wh=warehouse: ingest(wh, [str(azure)])))
        times["duckdb_jsonl"].append(
            timed(
                lambda: duckdb.connect().execute(
                    f"COPY (FROM read_json('{mooncake}')) TO '{work}/mooncake.parquet' "
                    "(FORMAT parquet)"
                )
            )
        )
        times["kvtrace_jsonl"].append(timed(lambda wh=warehouse: ingest(wh, [str(mooncake)])))
        con = connect(warehouse)
        times["lru"].append(
            timed(
                lambda c=con: c.execute(
                    "SELECT count(*) FROM workload_prefix_hit_curve('lru')"
                ).fetchall()
            )
        )
        times["opt"].append(
            timed(
                lambda c=con: c.execute(
                    "SELECT count(*) FROM workload_prefix_hit_curve('opt', [1024, 16384])"
                ).fetchall()
            )
        )
        accesses = con.execute("SELECT sum(len(hash_ids)) FROM workload_requests").fetchone()[0]
        con.close()
        print(f"round {round_no + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()))
    median = {k: statistics.median(v) for k, v in times.items()}
    figures = {
        "requests_csv": args.requests,
        "requests_jsonl": args.requests // 10,
        "block_reads": int(accesses),
        "csv_mb": azure.stat().st_size / 1e6,
        "jsonl_mb": mooncake.stat().st_size / 1e6,
        "median_s": median,
        "csv_ratio": median["duckdb_csv"] / median["kvtrace_csv"],
        "jsonl_ratio": median["duckdb_jsonl"] / median["kvtrace_jsonl"],
    }
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "bench_workload.json").write_text(json.dumps(figures, indent=2))
    print(
        f"\n| measure | kvtrace | DuckDB COPY to Parquet | ratio |\n|---|---|---|---|\n"
        f"| Azure CSV, {args.requests:,} requests ({figures['csv_mb']:.0f} MB) | "
        f"{median['kvtrace_csv']:.2f} s | {median['duckdb_csv']:.2f} s | "
        f"{figures['csv_ratio']:.2f}x |\n"
        f"| Mooncake JSONL, {args.requests // 10:,} requests ({figures['jsonl_mb']:.0f} MB) | "
        f"{median['kvtrace_jsonl']:.2f} s | {median['duckdb_jsonl']:.2f} s | "
        f"{figures['jsonl_ratio']:.2f}x |"
    )
    print(
        f"\nprefix-cache curves over {accesses:,} block reads: LRU (every capacity) "
        f"{median['lru']:.2f} s, OPT at 2 capacities {median['opt']:.2f} s"
    )


if __name__ == "__main__":
    main()
