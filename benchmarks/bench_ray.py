"""Ray engine benchmark: `kvtrace whatif` on one machine's engine against Ray clusters of
one and of two worker processes, in one run.

    python benchmarks/bench_ray.py --requests 16 --steps 128 --granularity layer_block

Writes a synthetic DSA trace (the selections of `kvtrace.synthetic`, top-2048 of a
16k-token context) into a temporary warehouse, then times in interleaved rounds the
what-if simulation (three tiers, block size 64, LRU, one cache per request):

1. the local engine (`kvtrace.sql.kv_access.whatif.whatif`, one process);
2. ``--engine ray`` on a local Ray cluster with one worker CPU;
3. the same with two worker CPUs (a head and a worker node).

Checks that the three answers are identical, prints medians and the speed-ups, and
writes the figures as JSON to ``benchmarks/out/``.  Cluster start-up is not timed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import ray
from bench_warehouse import machine
from ray.cluster_utils import Cluster

from kvtrace.distributed import ray_engine
from kvtrace.ingest import ingest
from kvtrace.sql import connect
from kvtrace.sql.kv_access.whatif import Tier, whatif
from kvtrace.synthetic import write_seed_trace
from kvtrace.warehouse import Warehouse

TIERS = [Tier.parse("hbm:512:3000:0"), Tier.parse("local:4096:50:5"),
         Tier.parse("remote:inf:20:30")]
SETTINGS = {"block_sizes": [64], "tiers": TIERS, "policy": "lru", "granularity": "block",
            "scope": "request", "bytes_per_token": 656, "runs": None}


def _local(warehouse: Warehouse):
    con = connect(warehouse)
    try:
        return whatif(con, **SETTINGS)
    finally:
        con.close()


def _on_cluster(workers: int, warehouse: Warehouse, rounds: int) -> tuple[list[float], object]:
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1,
                                                          "include_dashboard": False})
    for _ in range(workers - 1):
        nodes.add_node(num_cpus=1)
    ray_engine.start(nodes.address)
    try:
        ray_engine.whatif_on_ray(warehouse, tasks=workers * 2, **SETTINGS)  # warm the workers
        times, result = [], None
        for _ in range(rounds):
            started = time.perf_counter()
            result = ray_engine.whatif_on_ray(warehouse, tasks=workers * 2, **SETTINGS)
            times.append(time.perf_counter() - started)
        return times, result
    finally:
        ray.shutdown()
        nodes.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--steps", type=int, default=128)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--granularity", choices=["block", "layer_block"], default="block",
                        help="layer_block: 16x the accesses, simulation-bound")
    args = parser.parse_args()
    SETTINGS["granularity"] = args.granularity
    with tempfile.TemporaryDirectory() as scratch:
        trace = Path(scratch) / "bench" / "block64" / "trace.jsonl"
        trace.parent.mkdir(parents=True)
        write_seed_trace(trace, requests=args.requests, steps=args.steps, layers=args.layers,
                         prompt_tokens=16_000, run_name="bench")
        warehouse = Warehouse(Path(scratch) / "wh", create=True)
        ingest(warehouse, [str(trace)])
        _local(warehouse)  # warm the numba cache
        local = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            expected = _local(warehouse)
            local.append(time.perf_counter() - started)
        one, one_result = _on_cluster(1, warehouse, args.rounds)
        two, two_result = _on_cluster(2, warehouse, args.rounds)
    for result in (one_result, two_result):
        assert result.tiers.to_pylist() == expected.tiers.to_pylist()  # type: ignore[attr-defined]
        assert result.runs.to_pylist() == expected.runs.to_pylist()  # type: ignore[attr-defined]
    figures = {
        "machine": machine(), "requests": args.requests, "steps": args.steps,
        "layers": args.layers, "rounds": args.rounds, "granularity": args.granularity,
        "local_s": statistics.median(local), "ray_1_worker_s": statistics.median(one),
        "ray_2_workers_s": statistics.median(two),
    }
    figures["speedup_1_to_2_workers"] = figures["ray_1_worker_s"] / figures["ray_2_workers_s"]
    figures["ray_2_workers_vs_local"] = figures["local_s"] / figures["ray_2_workers_s"]
    print(json.dumps(figures, indent=2))
    out = Path(__file__).parent / "out" / "ray.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
