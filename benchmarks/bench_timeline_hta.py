"""Profiler timelines: kvtrace against Holistic Trace Analysis, time and peak memory.

    python benchmarks/bench_timeline_hta.py --ranks 8 --iterations 160 --rounds 3

Generates one Kineto trace per rank with `kvtrace.synthetic.timeline` (a 61-layer decode
with KV prefetch and offload copies and a tensor-parallel all-reduce per layer; no GPU
annotations, which HTA would count as compute), then runs, each in a fresh process:

- HTA: ``TraceAnalysis`` (load every rank, last profiler step included) and its temporal
  breakdown, kernel breakdown (memory kernels included) and comm / comp overlap;
- kvtrace, as a user runs it: the command ``kvtrace ingest --jobs <cores>`` into a new
  warehouse, then one ``kvtrace sql`` asking the same three analyses
  (``timeline_temporal_breakdown``, ``timeline_kernel_breakdown``,
  ``timeline_comm_comp_overlap``); then that ``kvtrace sql`` alone on the warehouse built.

Both use every core (HTA parses ranks in a process pool).  Peak memory is the largest sum
of the resident sets of the process and its children, sampled every 20 ms.  The answers
are compared too.  Rounds are interleaved; the table gives medians.  Prints a Markdown
table; writes JSON to ``benchmarks/out/``.
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
import threading
import time
from pathlib import Path

import psutil

from kvtrace.synthetic.timeline import TimelineShape, write_timeline_trace

HERE = Path(__file__).parent

HTA_RUN = """
import json, logging, sys, warnings
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)
temporal = analysis.get_temporal_breakdown(visualize=False)
overlap = analysis.get_comm_comp_overlap(visualize=False)
_, kernels = analysis.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
print(json.dumps({
    "temporal": sorted([int(r["rank"]), r["kernel_time(us)"], r["idle_time(us)"],
                        r["compute_time(us)"]] for _, r in temporal.iterrows()),
    "overlap_pctg": sorted([int(r["rank"]), r["comp_comm_overlap_pctg"]]
                           for _, r in overlap.iterrows()),
    "kernel_us": sorted([int(rank), kind.lower(), total] for (rank, kind), total
                        in kernels.groupby(["rank", "kernel_type"])["sum (us)"].sum().items()
                        if total > 0)}, default=float))
"""

KVTRACE_QUERY = """
SELECT (SELECT list([rank, kernel_time_us, idle_us, compute_us] ORDER BY rank)
        FROM timeline_temporal_breakdown) AS temporal,
       (SELECT list([rank, round(100 * overlap_share, 2)] ORDER BY rank)
        FROM timeline_comm_comp_overlap) AS overlap_pctg,
       (SELECT list([rank::VARCHAR, kernel_type, total_us::VARCHAR] ORDER BY rank, kernel_type)
        FROM timeline_kernel_breakdown WHERE kernel_type <> 'other') AS kernel_us
"""


def measured(command: list[str]) -> tuple[float, float, str]:
    """Run ``command``; (seconds, peak MB of its process tree, its output)."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        root = psutil.Process(process.pid)
        while not done.is_set():
            try:
                tree = [root, *root.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in tree))
            except psutil.Error:
                pass
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    out, _ = process.communicate()
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    if process.returncode:
        raise SystemExit(f"benchmark step failed: {' '.join(command)}")
    return seconds, peak / 1e6, out


def hta_run(traces: Path) -> tuple[float, float, dict]:
    seconds, peak, out = measured([sys.executable, "-c", HTA_RUN, str(traces)])
    return seconds, peak, json.loads(out.strip().splitlines()[-1])


def kvtrace_run(traces: Path, warehouse: Path, ingest: bool) -> tuple[float, float, dict]:
    """``kvtrace ingest`` (when asked) and one ``kvtrace sql`` for the three analyses, as
    a user runs them: seconds summed, peak memory the larger of the two processes'."""
    kvtrace = [sys.executable, "-m", "kvtrace", "--warehouse", str(warehouse)]
    seconds = peak = 0.0
    if ingest:
        cores = str(os.cpu_count() or 1)
        seconds, peak, _ = measured([*kvtrace, "--quiet", "ingest", str(traces), "--jobs", cores])
    query_s, query_peak, out = measured([*kvtrace, "sql", KVTRACE_QUERY, "--format", "json"])
    (answers,) = json.loads(out)
    answers["kernel_us"] = [[int(r), kind, float(us)] for r, kind, us in answers["kernel_us"]]
    return seconds + query_s, max(peak, query_peak), answers


def _median(results: list[tuple[float, float, dict]]) -> tuple[float, float, dict]:
    """Median seconds and median peak memory over the rounds, with the last answers."""
    return (
        statistics.median(r[0] for r in results),
        statistics.median(r[1] for r in results),
        results[-1][2],
    )


def _same_rows(ours: list[list], theirs: list[list]) -> bool:
    """Equal rows: text exactly, numbers within 0.01."""
    flat_ours = [value for row in ours for value in [*row, None]]  # None ends each row
    flat_theirs = [value for row in theirs for value in [*row, None]]
    if len(flat_ours) != len(flat_theirs):
        return False
    return all(
        x == y if None in (x, y) or isinstance(x, str) else abs(x - y) <= 0.01
        for x, y in zip(flat_ours, flat_theirs, strict=True)
    )


def write_traces(traces: Path, ranks: int, iterations: int, layers: int = 61) -> TimelineShape:
    """One synthetic Kineto trace per rank in the folder ``traces``, unless it is there."""
    shape = TimelineShape(
        iterations=iterations,
        layers=layers,
        kernels_per_layer=4,
        compute_us=240,
        comm_us=40,
        comm_hidden_us=32,
        gpu_annotations=False,
    )
    if not traces.exists():
        traces.mkdir(parents=True)
        for rank in range(ranks):
            write_timeline_trace(
                traces / f"rank{rank}.pt.trace.json", shape, rank=rank, world_size=ranks
            )
    return shape


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=160)
    parser.add_argument("--layers", type=int, default=61)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="kvtrace-bench-hta-"))
    traces = work / "traces"
    shape = write_traces(traces, args.ranks, args.iterations, args.layers)
    megabytes = sum(p.stat().st_size for p in traces.iterdir()) / 1e6
    print(f"{args.ranks} ranks, {megabytes:.2f} MB of traces")

    runs: dict[str, list[tuple[float, float, dict]]] = {"hta": [], "kvtrace": [], "queries": []}
    for round_no in range(args.rounds):  # interleaved, so drifts of the VM hit both alike
        runs["hta"].append(hta_run(traces))
        shutil.rmtree(work / "wh", ignore_errors=True)
        runs["kvtrace"].append(kvtrace_run(traces, work / "wh", ingest=True))
        runs["queries"].append(kvtrace_run(traces, work / "wh", ingest=False))
        print(
            f"round {round_no + 1}: "
            + ", ".join(f"{name} {r[-1][0]:.1f} s {r[-1][1]:.0f} MB" for name, r in runs.items())
        )
    hta, kvtrace, queries = (_median(runs[name]) for name in ("hta", "kvtrace", "queries"))
    ratios = [h[0] / k[0] for h, k in zip(runs["hta"], runs["kvtrace"], strict=True)]
    agree = all(
        _same_rows(hta[2][key], kvtrace[2][key])
        for key in ("temporal", "overlap_pctg", "kernel_us")
    )
    figures = {
        "ranks": args.ranks,
        "trace_mb": megabytes,
        "cores": os.cpu_count(),
        "shape": shape.__dict__,
        "answers_agree": agree,
        "hta": {"seconds": hta[0], "peak_mb": hta[1]},
        "kvtrace_ingest_and_analyses": {"seconds": kvtrace[0], "peak_mb": kvtrace[1]},
        "kvtrace_analyses": {"seconds": queries[0], "peak_mb": queries[1]},
        "rounds": args.rounds,
        "speedup_per_round": ratios,
        "speedup": hta[0] / kvtrace[0],
        "memory_ratio": hta[1] / kvtrace[1],
        "speedup_analyses_only": hta[0] / queries[0],
    }
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / f"timeline_hta_{args.ranks}x{args.iterations}.json").write_text(
        json.dumps(figures, indent=2)
    )
    print(
        f"\nanswers agree: {agree}\n\n"
        f"| {args.ranks} ranks, {megabytes:.2f} MB | time | peak memory |\n|---|---|---|\n"
        f"| HTA load + 3 analyses | {hta[0]:.1f} s | {hta[1]:.0f} MB |\n"
        f"| kvtrace ingest + 3 analyses | {kvtrace[0]:.1f} s ({figures['speedup']:.1f}x; "
        f"rounds {min(ratios):.1f}-{max(ratios):.1f}x) | "
        f"{kvtrace[1]:.0f} MB (1/{figures['memory_ratio']:.1f}) |\n"
        f"| kvtrace 3 analyses on the warehouse | {queries[0]:.1f} s "
        f"({figures['speedup_analyses_only']:.0f}x) | {queries[1]:.0f} MB |"
    )


if __name__ == "__main__":
    main()
