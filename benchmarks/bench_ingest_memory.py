"""Peak memory of ingest as the JSONL grows: it should stay flat.

    python benchmarks/bench_ingest_memory.py --gb 0.5 1 2

Generates seed-format DSA traces (61 layers, 2048 positions a row, synthetic) of each
size and ingests each in a fresh process, reporting that process's peak RSS (VmHWM).
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

from bench_warehouse import ROW_BYTES_AT_12K, machine

from kvtrace.synthetic import write_seed_trace

HERE = Path(__file__).parent
_INGEST = (
    "import re, sys; from kvtrace.ingest import ingest; "
    "from kvtrace.warehouse import Warehouse; "
    "ingest(Warehouse(sys.argv[1], create=True), [sys.argv[2]]); "
    "print(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read())[1])"
)


def peak_rss_mb(trace: Path, warehouse: Path) -> tuple[float, float]:
    """Peak RSS (MB) and seconds of ingesting ``trace`` in a fresh process."""
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
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="kvtrace-bench-rss-"))
    figures = []
    for gb in args.gb:
        trace = work / f"rss{gb}" / "block64" / "trace_steps_0_n.jsonl"
        trace.parent.mkdir(parents=True, exist_ok=True)
        steps = 16
        requests = max(1, int(gb * 1e9 / ROW_BYTES_AT_12K) // (61 * steps))
        write_seed_trace(
            trace,
            requests=requests,
            steps=steps,
            layers=61,
            topk=2048,
            prompt_tokens=12000,
            run_name=f"rss{gb}",
            dataset="synthetic-bench",
        )
        size_mb = trace.stat().st_size / 1e6
        rss, seconds = peak_rss_mb(trace, work / f"wh{gb}")
        trace.unlink()
        figures.append(
            {"jsonl_mb": round(size_mb), "peak_rss_mb": round(rss), "ingest_s": round(seconds, 1)}
        )
        print(f"{size_mb:,.0f} MB of JSONL: peak RSS {rss:,.0f} MB ({seconds:.0f} s)", flush=True)
    print(f"\nMachine: {machine()}\n")
    print("| JSONL | ingest peak RSS |\n|---|---|")
    for f in figures:
        print(f"| {f['jsonl_mb']:,} MB | {f['peak_rss_mb']:,} MB |")
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "ingest_memory.json").write_text(
        json.dumps({"machine": machine(), "figures": figures}, indent=2)
    )


if __name__ == "__main__":
    main()
