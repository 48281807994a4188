"""Peak memory of ingesting large Kineto traces, each in a fresh process.

    python benchmarks/bench_timeline_memory.py --mb 500 2000

Writes a Chrome trace of about each size (iterations of kernels on a compute stream and
H2D / D2H copies on their own streams, as an offloading engine records them), ingests it
with kvtrace in a new process and reports that process's peak RSS (VmHWM).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write_trace(path: Path, megabytes: float) -> int:
    """A trace of about ``megabytes`` MB; returns its events."""
    target = megabytes * 1e6
    written, events, ts = 0, 0, 0.0
    with open(path, "w") as out:
        out.write('{"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1},\n'
                  ' "traceEvents": [\n')
        step = 0
        while written < target:
            lines = [json.dumps({"ph": "X", "cat": "cpu_op", "name": f"ProfilerStep#{step}",
                                 "pid": 1, "tid": 1, "ts": ts, "dur": 10_000.0})]
            for i in range(2_000):
                start = ts + i * 5.0
                lines.append(json.dumps({
                    "ph": "X", "cat": "kernel", "name": "void gemm_kernel<float>(...)",
                    "pid": 0, "tid": 7, "ts": start, "dur": 4.0,
                    "args": {"stream": 7, "device": 0, "correlation": events + i,
                             "External id": events + i}}))
                if i % 4 == 0:
                    kind = "HtoD (Pinned -> Device)" if i % 8 == 0 else "DtoH (Device -> Pinned)"
                    lines.append(json.dumps({
                        "ph": "X", "cat": "gpu_memcpy", "name": f"Memcpy {kind}",
                        "pid": 0, "tid": 20, "ts": start + 1.0, "dur": 6.0,
                        "args": {"stream": 20 if "HtoD" in kind else 21, "device": 0,
                                 "bytes": 4_194_304}}))
            block = ",\n".join(lines) + ",\n"
            out.write(block)
            written += len(block)
            events += len(lines)
            ts += 10_000.0
            step += 1
        out.write('{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "end"}}\n'
                  ']}\n')
    return events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, nargs="+", default=[500.0, 2000.0])
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="kvtrace-bench-timeline-"))
    work.mkdir(parents=True, exist_ok=True)
    script = ("import re, sys; from kvtrace.ingest import ingest; "
              "from kvtrace.warehouse import Warehouse; "
              "r = ingest(Warehouse(sys.argv[1], create=True), [sys.argv[2]]); "
              "print(r.rows, re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read())[1])")
    print("| trace | events | ingest | peak RSS |\n|---|---|---|---|")
    for megabytes in args.mb:
        trace = work / f"trace_{int(megabytes)}.pt.trace.json"
        events = write_trace(trace, megabytes)
        start = time.perf_counter()
        child = subprocess.run([sys.executable, "-c", script, str(work / f"wh{megabytes}"),
                                str(trace)], check=True, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        rows, peak_kb = child.stdout.split()[-2:]
        print(f"| {trace.stat().st_size / 1e6:,.0f} MB | {events:,} ({int(rows):,} rows) | "
              f"{seconds:.0f} s | {int(peak_kb) / 1024:,.0f} MB |")
        trace.unlink()
        subprocess.run(["rm", "-rf", str(work / f"wh{megabytes}")], check=True)


if __name__ == "__main__":
    main()
