"""Peak memory of ingesting large Kineto traces, each in a fresh process.

    python benchmarks/bench_timeline_memory.py --mb 500 2000

Writes a trace of about each size with `kvtrace.synthetic.timeline` (a 61-layer decode
with prefetch and offload copies and a tensor-parallel all-reduce per layer), ingests it
with kvtrace in a new process and reports that process's peak RSS (VmHWM).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from kvtrace.synthetic.timeline import TimelineShape, write_timeline_trace

SHAPE = TimelineShape(layers=61, kernels_per_layer=4, compute_us=240, comm_us=40, comm_hidden_us=32)


def write_trace(path: Path, megabytes: float) -> None:
    """A trace of about ``megabytes`` MB: as many iterations as that takes."""
    write_timeline_trace(path, replace(SHAPE, iterations=2))
    per_iteration = path.stat().st_size / 2
    iterations = max(1, round(megabytes * 1e6 / per_iteration))
    write_timeline_trace(path, replace(SHAPE, iterations=iterations))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, nargs="+", default=[500.0, 2000.0])
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="kvtrace-bench-timeline-"))
    work.mkdir(parents=True, exist_ok=True)
    script = (
        "import re, sys; from kvtrace.ingest import ingest; "
        "from kvtrace.warehouse import Warehouse; "
        "r = ingest(Warehouse(sys.argv[1], create=True), [sys.argv[2]]); "
        "print(r.rows, re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read())[1])"
    )
    print("| trace | rows | ingest | peak RSS |\n|---|---|---|---|")
    for megabytes in args.mb:
        trace = work / f"trace_{int(megabytes)}.pt.trace.json"
        write_trace(trace, megabytes)
        start = time.perf_counter()
        child = subprocess.run(
            [sys.executable, "-c", script, str(work / f"wh{megabytes}"), str(trace)],
            check=True,
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - start
        rows, peak_kb = child.stdout.split()[-2:]
        print(
            f"| {trace.stat().st_size / 1e6:,.0f} MB | {int(rows):,} | "
            f"{seconds:.0f} s | {int(peak_kb) / 1024:,.0f} MB |"
        )
        trace.unlink()
        subprocess.run(["rm", "-rf", str(work / f"wh{megabytes}")], check=True)


if __name__ == "__main__":
    main()
