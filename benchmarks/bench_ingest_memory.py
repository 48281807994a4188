"""Peak memory of ingest as the JSONL grows: it should stay flat.

    python benchmarks/bench_ingest_memory.py --gb 0.5 1 2 [--family mooncake]

Generates seed-format DSA traces (61 layers, 2048 positions a row, synthetic), or with
``--family mooncake`` Mooncake-like arrival traces (``bench_workload.write_mooncake``),
of each size and ingests each twice in fresh processes: the ``kvtrace ingest`` command (peak RSS
from GNU time) and ``kvtrace.ingest.ingest`` called from Python (its VmHWM).
Prints a Markdown table and writes the figures as JSON to ``benchmarks/out/``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_warehouse import KVTRACE, machine, process, write_dsa_trace
from bench_workload import write_mooncake

HERE = Path(__file__).parent
MOONCAKE_REQUEST_BYTES = 194  # JSONL bytes of one generated Mooncake-like request
_INGEST = (
    "import re, sys; from kvtrace.ingest import ingest; "
    "from kvtrace.warehouse import Warehouse; "
    "ingest(Warehouse(sys.argv[1], create=True), [sys.argv[2]]); "
    "print(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read())[1])"
)


def command_peak_rss_mb(trace: Path, warehouse: Path) -> tuple[float, float]:
    """Peak RSS (MB) and seconds of the ``kvtrace ingest`` command on ``trace``."""
    run = process([KVTRACE, "-q", "-w", str(warehouse), "ingest", str(trace)])
    shutil.rmtree(warehouse)
    return run.peak_rss_mb, run.wall


def library_peak_rss_mb(trace: Path, warehouse: Path) -> tuple[float, float]:
    """Peak RSS (MB) and seconds of ``kvtrace.ingest.ingest`` on ``trace`` in a fresh
    Python process (Arrow's default memory pool: the command picks jemalloc)."""
    start = time.perf_counter()
    child = subprocess.run(
        [sys.executable, "-c", _INGEST, str(warehouse), str(trace)],
        check=True,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    shutil.rmtree(warehouse)
    return int(child.stdout.split()[-1]) / 1024, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--gb", type=float, nargs="+", default=[0.5, 1.0, 2.0], help="JSONL sizes to generate (GB)"
    )
    parser.add_argument("--family", choices=["dsa", "mooncake"], default="dsa")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="kvtrace-bench-rss-"))
    figures = []
    for gb in args.gb:
        trace = work / f"rss{gb}" / "block64" / "trace_steps_0_n.jsonl"
        trace.parent.mkdir(parents=True, exist_ok=True)
        if args.family == "mooncake":
            trace = trace.with_name("mooncake.jsonl")
            requests = int(gb * 1e9 / MOONCAKE_REQUEST_BYTES)
            write_mooncake(trace, requests, np.random.default_rng(0))
        else:
            write_dsa_trace(trace, gb * 1000)
        size_mb = trace.stat().st_size / 1e6
        rss, seconds = command_peak_rss_mb(trace, work / f"wh{gb}")
        library_rss, _ = library_peak_rss_mb(trace, work / f"wh{gb}")
        trace.unlink()
        figures.append(
            {
                "jsonl_mb": round(size_mb),
                "peak_rss_mb": round(rss),
                "library_peak_rss_mb": round(library_rss),
                "ingest_s": round(seconds, 1),
            }
        )
        print(
            f"{size_mb:,.0f} MB of JSONL: kvtrace ingest peak RSS {rss:,.0f} MB ({seconds:.0f} s), "
            f"ingest() from Python {library_rss:,.0f} MB",
            flush=True,
        )
    print(f"\nMachine: {machine()}\n")
    print("| JSONL | `kvtrace ingest` peak RSS | `ingest()` from Python |\n|---|---|---|")
    for f in figures:
        print(
            f"| {f['jsonl_mb']:,} MB | {f['peak_rss_mb']:,} MB | {f['library_peak_rss_mb']:,} MB |"
        )
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    name = "ingest_memory.json" if args.family == "dsa" else f"ingest_memory_{args.family}.json"
    (out / name).write_text(
        json.dumps({"machine": machine(), "family": args.family, "figures": figures}, indent=2)
    )


if __name__ == "__main__":
    main()
