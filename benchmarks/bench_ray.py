"""Ray engine benchmark: `kvtrace whatif` and `kvtrace summary` on one machine's engine
against Ray clusters of one and of two worker processes, in one run.

    python benchmarks/bench_ray.py --requests 16 --steps 128 --granularity layer_block

Writes a synthetic DSA trace (the selections of `kvtrace.synthetic`, top-2048 of a
16k-token context) into a temporary warehouse, then times, in rounds, two jobs:

- the what-if simulation (three tiers, block size 64, LRU, one cache per request);
- the run's summary.json (`run_summary`), whose row statistics are counted per share.

each on:

1. the local engine (one process);
2. ``--engine ray`` on a local Ray cluster with one worker CPU;
3. the same with two worker CPUs (a head and a worker node).

Checks that the three answers of each job are identical, prints medians and the
speed-ups, and writes the figures as JSON to ``benchmarks/out/``.  Cluster start-up is not
timed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray
from bench_warehouse import machine
from ray.cluster_utils import Cluster

from kvtrace.analysis.kv_access.whatif import Tier, WhatIfAnalysis, WhatIfSpec
from kvtrace.analysis.shares import run_analysis
from kvtrace.analysis.summary import SummaryAnalysis, SummarySpec
from kvtrace.distributed import ray_engine
from kvtrace.ingest import ingest
from kvtrace.synthetic import write_seed_trace
from kvtrace.warehouse import Warehouse

TIERS = (
    Tier.parse("hbm:512:3000:0"),
    Tier.parse("local:4096:50:5"),
    Tier.parse("remote:inf:20:30"),
)
SPEC = WhatIfSpec(
    block_sizes=(64,),
    tiers=TIERS,
    policy="lru",
    granularity="block",
    scope="request",
    bytes_per_token=656,
)
ANALYSES = {"whatif": WhatIfAnalysis(SPEC), "summary": SummaryAnalysis(SummarySpec("bench"))}
JOBS = tuple(ANALYSES)


def _local(job: str, warehouse: Warehouse) -> Any:
    return run_analysis(ANALYSES[job], warehouse)


def _on_ray(job: str, warehouse: Warehouse, tasks: int) -> Any:
    return run_analysis(ANALYSES[job], warehouse, ray_engine.RayExecutor(), tasks=tasks)


def _timed(run: Callable[[str], Any], rounds: int) -> dict[str, tuple[list[float], Any]]:
    """Per job: the seconds of each round, after one untimed warm-up, and the answer."""
    figures = {}
    for job in JOBS:
        result = run(job)
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            result = run(job)
            times.append(time.perf_counter() - started)
        figures[job] = (times, result)
    return figures


def _on_cluster(
    workers: int, warehouse: Warehouse, rounds: int
) -> dict[str, tuple[list[float], Any]]:
    nodes = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    for _ in range(workers - 1):
        nodes.add_node(num_cpus=1)
    ray_engine.start(nodes.address)
    try:
        return _timed(lambda job: _on_ray(job, warehouse, workers * 2), rounds)
    finally:
        ray.shutdown()
        nodes.shutdown()


def _same(job: str, a: Any, b: Any) -> bool:
    if job == "summary":
        return a == b  # floats compared exactly
    return a.tiers.to_pylist() == b.tiers.to_pylist() and a.runs.to_pylist() == b.runs.to_pylist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--steps", type=int, default=128)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--granularity",
        choices=["block", "layer_block"],
        default="block",
        help="layer_block: 16x the accesses, simulation-bound",
    )
    args = parser.parse_args()
    ANALYSES["whatif"] = WhatIfAnalysis(dataclasses.replace(SPEC, granularity=args.granularity))
    with tempfile.TemporaryDirectory() as scratch:
        trace = Path(scratch) / "bench" / "block64" / "trace.jsonl"
        trace.parent.mkdir(parents=True)
        write_seed_trace(
            trace,
            requests=args.requests,
            steps=args.steps,
            layers=args.layers,
            prompt_tokens=16_000,
            run_name="bench",
        )
        warehouse = Warehouse(Path(scratch) / "wh", create=True)
        ingest(warehouse, [str(trace)])
        local = _timed(lambda job: _local(job, warehouse), args.rounds)
        one = _on_cluster(1, warehouse, args.rounds)
        two = _on_cluster(2, warehouse, args.rounds)
    figures: dict[str, Any] = {
        "machine": machine(),
        "requests": args.requests,
        "steps": args.steps,
        "layers": args.layers,
        "rounds": args.rounds,
        "granularity": args.granularity,
    }
    for job in JOBS:
        expected = local[job][1]
        assert _same(job, one[job][1], expected) and _same(job, two[job][1], expected), job
        times = {
            name: statistics.median(engine[job][0])
            for name, engine in (
                ("local_s", local),
                ("ray_1_worker_s", one),
                ("ray_2_workers_s", two),
            )
        }
        times["speedup_1_to_2_workers"] = times["ray_1_worker_s"] / times["ray_2_workers_s"]
        times["ray_2_workers_vs_local"] = times["local_s"] / times["ray_2_workers_s"]
        figures[job] = times
    print(json.dumps(figures, indent=2))
    out = Path(__file__).parent / "out" / "ray.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
