"""Prefix-cache benchmark: kvtrace's prefix hit curves against kvcache-simulator, in one run.

    python benchmarks/bench_prefix.py [--requests 1000000]

1. The Mooncake FAST'25 conversation trace (`tests/data`, 12,031 requests, 288,500 block
   reads): kvcache-simulator 0.1.3's ``run`` (its C++ backend, Llama-3.1-8B's 13 budgets
   from 1 to 4,096 GiB that fit the trace, FIFO, LRU and optimal, half the requests as
   warm-up) against the same three curves from one ``kvtrace sql`` process
   (``workload_prefix_hit_curve`` with semantics 'prefix', token weight, warm-up 0.5, at
   the same capacities in blocks), each a fresh process; and both in this process.  The
   hit rates must agree.
2. A trace of ``--requests`` requests (the conversation trace repeated with fresh block
   ids, so each copy shares prefixes within itself): the LRU prefix curve at 16
   capacities, in this process and as a fresh ``kvtrace sql`` process.
3. Memory, once each: a Mooncake-like trace of ``--memory-requests`` requests
   (`bench_workload.write_mooncake`: conversations of a few turns), every prefix curve
   kvtrace has (each policy under each semantics it serves, the default capacities) as a
   fresh ``kvtrace prefix-curve`` command, its peak resident memory and CPU seconds; then
   kvcache-simulator's ``run`` for each of its policies beside ``kvtrace prefix-curve``
   for the same one at Llama-3.1-8B's 11 budgets from 1 to 1,024 GiB, half the requests
   warm-up, both from the same trace, the hit rates compared.

Prints medians of three rounds (memory: one) and writes ``benchmarks/out/prefix.json``.
"""

from __future__ import annotations

import argparse
import compileall
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_warehouse import machine
from bench_workload import write_mooncake

import kvtrace
from kvtrace import connect
from kvtrace.analysis.policies import POLICIES as REGISTRY
from kvtrace.analysis.prefix_cache import PrefixCurveSpec, prefix_hit_curve_rows
from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse

HERE = Path(__file__).parent
TRACE = HERE.parent / "tests" / "data" / "mooncake_conversation_trace.jsonl"
BIN = Path(sys.executable).parent
CAPACITIES = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536]
POLICIES = {"fifo": "fifo", "radix_lru": "lru", "opt": "optimal"}  # kvtrace: theirs
BUDGETS_GIB = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]  # Llama-3.1-8B: 16-16,384 blocks


def kvcache_simulator_run(trace: Path) -> list[str]:
    """kvcache-simulator's sweep of ``trace`` at Llama-3.1-8B's budgets."""
    return [
        str(BIN / "kvcache-simulator"),
        *("run", "--trace", str(trace), "--model", "llama-3.1-8b", "--block-size", "512"),
        *("--format", "json", "--no-progress"),
    ]


KVCACHE_SIMULATOR_RUN = kvcache_simulator_run(TRACE)


def byte_compile_kvtrace() -> None:
    """Write kvtrace's bytecode, as an installed package has it: an editable install run
    under PYTHONDONTWRITEBYTECODE compiles every module it imports anew in each process
    (a tenth of a second of a command's start-up), where the other tools' installs have
    their bytecode."""
    compileall.compile_dir(Path(kvtrace.__file__).parent, quiet=1)


def timed(command: list[str], rounds: int) -> tuple[float, str]:
    times, out = [], ""
    for _ in range(rounds):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        times.append(time.perf_counter() - start)
        out = done.stdout
    return statistics.median(times), out


def curves_sql(policies: list[str], capacities: list[int]) -> str:
    listed = ", ".join(map(str, capacities))
    return " UNION ALL ".join(
        f"SELECT policy, capacity_blocks, hit_rate FROM workload_prefix_hit_curve('{p}', "
        f"[{listed}], 'prefix', 'tokens', 0.5)"
        for p in policies
    )


def against_kvcache_simulator(root: str, rounds: int) -> dict:
    from kvcache_sim.simulator import run_sweep
    from kvcache_sim.trace import parse_trace_file

    theirs_s, _ = timed(KVCACHE_SIMULATOR_RUN, rounds)
    ours_s, printed = timed(
        [
            str(BIN / "kvtrace"),
            "-q",
            "-w",
            root,
            "sql",
            curves_sql(list(POLICIES), CAPACITIES),
            "--format",
            "json",
        ],
        rounds,
    )
    start = time.perf_counter()
    swept = run_sweep(parse_trace_file(TRACE, block_size=512), model_id="llama-3.1-8b")
    theirs_in = time.perf_counter() - start
    con = connect(Warehouse(root))
    start = time.perf_counter()
    rows = [
        row
        for policy in POLICIES
        for row in prefix_hit_curve_rows(
            con, PrefixCurveSpec(policy, tuple(CAPACITIES), "prefix", "tokens", 0.5)
        )
    ]
    ours_in = time.perf_counter() - start
    reference = {
        (policy, point["cacheBlocks"]): point["results"][policy]["hitRate"]
        for point in swept["points"]
        for policy in POLICIES.values()
    }
    ours = {(POLICIES[r["policy"]], r["capacity_blocks"]): r["hit_rate"] for r in rows}
    compared = [key for key in reference if key in ours]
    worst = max(abs(ours[key] - reference[key]) for key in compared)
    if worst > 1e-12:
        raise SystemExit(f"hit rates differ from kvcache-simulator's by up to {worst}")
    printed_rows = json.loads(printed)
    return {
        "points_compared": len(compared),
        "largest_difference": worst,
        "kvcache_simulator_command_s": theirs_s,
        "kvtrace_command_s": ours_s,
        "command_ratio": theirs_s / ours_s,
        "kvcache_simulator_in_process_s": theirs_in,
        "kvtrace_in_process_s": ours_in,
        "in_process_ratio": theirs_in / ours_in,
        "rows_printed": len(printed_rows),
    }


def scaled_trace(path: Path, requests: int) -> int:
    """The conversation trace repeated with fresh block ids (and an hour later each time)
    up to ``requests`` lines; returns the block reads written."""
    records = [json.loads(line) for line in TRACE.read_text().splitlines()]
    offset = 1 + max(h for r in records for h in r["hash_ids"])
    reads = 0
    with path.open("w") as out:
        for index in range(requests):
            copy, at = divmod(index, len(records))
            record = records[at]
            shifted = {
                **record,
                "timestamp": record["timestamp"] + copy * 3_600_000,
                "hash_ids": [h + copy * offset for h in record["hash_ids"]],
            }
            reads += len(shifted["hash_ids"])
            out.write(json.dumps(shifted) + "\n")
    return reads


def at_scale(scratch: Path, requests: int, rounds: int) -> dict:
    path = scratch / "scaled.jsonl"
    reads = scaled_trace(path, requests)
    root = str(scratch / "scaled-wh")
    warehouse = Warehouse(root, create=True)
    start = time.perf_counter()
    ingest(warehouse, [str(path)])
    ingest_s = time.perf_counter() - start
    capacities = [2**k for k in range(8, 24)]  # 16 capacities
    con = connect(Warehouse(root))
    spec = PrefixCurveSpec("lru", tuple(capacities), "prefix", "tokens", 0.5)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        prefix_hit_curve_rows(con, spec)
        times.append(time.perf_counter() - start)
    sql = (
        "SELECT capacity_blocks, hit_rate FROM workload_prefix_hit_curve('lru', "
        f"[{', '.join(map(str, capacities))}], 'prefix', 'tokens', 0.5)"
    )
    command_s, _ = timed([str(BIN / "kvtrace"), "-q", "-w", root, "sql", sql], rounds)
    return {
        "requests": requests,
        "block_reads": reads,
        "ingest_s": ingest_s,
        "capacities": len(capacities),
        "in_process_s": statistics.median(times),
        "command_s": command_s,
    }


_MEASURE = """
import json, os, subprocess, sys
process = subprocess.Popen(sys.argv[1:], stderr=subprocess.DEVNULL)
_, status, usage = os.wait4(process.pid, 0)
code = os.waitstatus_to_exitcode(status)
print(json.dumps([code, usage.ru_utime + usage.ru_stime, usage.ru_maxrss]), file=sys.stderr)
"""


def measured(command: list[str]) -> tuple[float, float, str]:
    """One run of ``command``: CPU seconds (user and system, its children's too), peak
    resident MiB (of the process or its largest child, as GNU time's %M) and output.  A
    small process of its own starts and waits for it: a child's peak counts from what its
    parent held when it started."""
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, *command], capture_output=True, text=True, check=True
    )
    code, cpu_s, peak_kib = json.loads(done.stderr.splitlines()[-1])
    if code:
        raise SystemExit(f"{' '.join(command)} failed ({code})")
    return cpu_s, peak_kib / 1024, done.stdout


def curves_memory(kvtrace_command: list[str]) -> dict:
    """Every prefix curve (each policy under each semantics it serves, the default
    capacities) as a fresh command: its CPU seconds and peak memory."""
    curves = {}
    for policy in REGISTRY:
        for semantics in policy.prefix_semantics:
            cpu_s, peak_mib, _ = measured(
                [*kvtrace_command, "--policy", policy.name, "--semantics", semantics]
            )
            curves[f"{policy.name} {semantics}"] = {"cpu_s": cpu_s, "peak_mib": peak_mib}
    return curves


def largest_difference(theirs_printed: str, ours_printed: str, theirs: str) -> tuple[int, float]:
    """The budgets where kvcache-simulator reports a rate, and the largest difference
    between its rates and kvtrace's there."""
    reference = {
        point["cacheBlocks"]: point["results"][theirs]["hitRate"]
        for point in json.loads(theirs_printed)["points"]
    }
    rates = {row["capacity_blocks"]: row["hit_rate"] for row in json.loads(ours_printed)}
    compared = [c for c in reference if reference[c] is not None and c in rates]
    return len(compared), max((abs(rates[c] - reference[c]) for c in compared), default=0.0)


def memory(root: str, trace: Path) -> dict:
    """`curves_memory` on the warehouse ``root``, then kvcache-simulator on ``trace``
    beside kvtrace at the same budgets (see the module docstring)."""
    kvtrace_command = [str(BIN / "kvtrace"), "-q", "-w", root, "prefix-curve"]
    budgets = [arg for gib in BUDGETS_GIB for arg in ("--capacity-gib", str(gib))]
    budgets += ["--warmup", "0.5", "--model", "llama-3-8b", "-f", "json"]
    against = {}
    for ours, theirs in POLICIES.items():
        theirs_s, theirs_mib, theirs_printed = measured(
            [
                *kvcache_simulator_run(trace),
                *("--policies", theirs, "--budgets-gib", ",".join(map(str, BUDGETS_GIB))),
            ]
        )
        ours_s, ours_mib, ours_printed = measured([*kvtrace_command, "--policy", ours, *budgets])
        compared, worst = largest_difference(theirs_printed, ours_printed, theirs)
        if worst > 1e-12:
            raise SystemExit(f"{ours}: hit rates differ from kvcache-simulator's by up to {worst}")
        against[ours] = {
            "points_compared": compared,
            "kvtrace_cpu_s": ours_s,
            "kvtrace_peak_mib": ours_mib,
            "kvcache_simulator_cpu_s": theirs_s,
            "kvcache_simulator_peak_mib": theirs_mib,
        }
    return {"curves": curves_memory(kvtrace_command), "kvcache_simulator": against}


def memory_at_scale(scratch: Path, requests: int) -> dict:
    """`memory` on a Mooncake-like trace of ``requests`` requests."""
    trace = scratch / "mooncake-like.jsonl"
    write_mooncake(trace, requests, np.random.default_rng(0))
    root = str(scratch / "mooncake-like-wh")
    ingest(Warehouse(root, create=True), [str(trace)])
    return {"requests": requests, **memory(root, trace)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memory-requests", type=int, default=1_000_000)
    args = parser.parse_args()
    byte_compile_kvtrace()
    with tempfile.TemporaryDirectory() as scratch:
        root = str(Path(scratch) / "wh")
        ingest(Warehouse(root, create=True), [str(TRACE)])
        figures = {
            "machine": machine(),
            "mooncake_conversation": against_kvcache_simulator(root, args.rounds),
            "scaled": at_scale(Path(scratch), args.requests, args.rounds),
            "memory": memory_at_scale(Path(scratch), args.memory_requests),
        }
    out = HERE / "out" / "prefix.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
