"""Routing what-if benchmark: a Mooncake trace replayed over a fleet, beside a plain-Python
replay of the same fleet on a sample.

    python benchmarks/bench_routing.py [--requests 1000000] [--workers 8]

1. The Mooncake FAST'25 conversation trace (`tests/data`, 12,031 requests) repeated with
   fresh block ids up to ``--requests`` requests (`bench_prefix.scaled_trace`: each copy
   shares prefixes within itself, an hour later than the one before), ingested once.
2. In this process, per policy (round_robin, least_loaded, session_hash, prefix_aware,
   prefix_cost) and cache (lru pool, radix tree): ``routing_rows`` (the rows of
   ``workload_routing``: the run's requests read from the warehouse, the replay, the
   per-worker rows) over ``--workers`` workers of 4,096 blocks each; the median of
   ``--rounds`` rounds; the kernel's own time (`kvtrace.kernels.routing.route`, the
   requests already loaded) beside it.
3. The same replay of the first ``--sample`` requests by kvtrace's kernel and by a
   plain-Python fleet (an OrderedDict LRU pool per worker, the router's scores computed
   per request for every worker): equal work, the same routing and hits (checked), the
   ratio of the two.

Prints JSON and writes ``benchmarks/out/routing.json``.  The default is 100,000 requests;
``--requests 1000000`` is the figure the guide quotes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

from bench_prefix import scaled_trace
from bench_warehouse import machine

from kvtrace import connect
from kvtrace.analysis.routing import POLICIES, RoutingSpec, load_requests, routed, routing_rows
from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse

HERE = Path(__file__).parent
CAPACITY = 4096  # blocks per worker: 2 Mi tokens of 512-token blocks


def _python_fleet(
    paths: list[list[tuple]], arrivals: list[float], ends: list[float], workers: int, policy: str
) -> list[tuple[int, int]]:
    """The fleet replayed in plain Python (LRU pools, the router's definitions as in
    kvtrace/analysis/routing.py): per request, its worker and hit blocks."""
    pools: list[OrderedDict[tuple, None]] = [OrderedDict() for _ in range(workers)]
    running: list[tuple[float, int, int]] = []
    last_chosen = [-1] * workers
    out = []
    for k, path in enumerate(paths):
        now = arrivals[k]
        running = [item for item in running if item[0] > now]
        load, held = [0] * workers, [0] * workers
        for _, worker, blocks in running:
            load[worker] += 1
            held[worker] += blocks
        runs = []
        for pool in pools:
            run = 0
            while run < len(path) and path[run] in pool:
                run += 1
            runs.append(run)
        if policy == "round_robin":
            chosen = k % workers
        else:
            values = []
            for x in range(workers):
                if policy == "prefix_aware":
                    queued = min(load[x], 128.0)
                    values.append(runs[x] / max(len(path), 1) + 0.5 * (1.0 - queued / 128.0))
                elif policy == "prefix_cost":
                    values.append(-((len(path) - runs[x]) + held[x] + len(path)))
                else:
                    values.append(0.0)
            chosen = min(range(workers), key=lambda x: (-values[x], load[x], last_chosen[x], x))
        last_chosen[chosen] = k
        if ends[k] > now:
            running.append((ends[k], chosen, len(path)))
        pool = pools[chosen]
        for block in path:
            if block in pool:
                pool.move_to_end(block)
                continue
            pool[block] = None
            if len(pool) > CAPACITY:
                pool.popitem(last=False)
        out.append((chosen, runs[chosen]))
    return out


def side_by_side(con, workers: int, sample: int) -> dict:
    """kvtrace's kernel and the plain-Python fleet on the first ``sample`` requests."""
    table = con.sql(
        "SELECT request_idx, hash_ids, input_tokens, hash_block_tokens, arrival_s, "
        "output_tokens, session_id::VARCHAR AS session_id FROM workload_requests "
        f"ORDER BY arrival_s, request_idx LIMIT {sample}"
    ).to_arrow_table()
    requests = load_requests(table)
    hashes = table["hash_ids"].to_pylist()
    paths = [[tuple(h[: j + 1]) for j in range(len(h))] for h in hashes]
    arrivals = requests.arrivals.tolist()
    ends = (requests.arrivals + requests.outputs * 30.0 / 1e3).tolist()
    found = {}
    for policy in ("round_robin", "least_loaded", "prefix_aware", "prefix_cost"):
        spec = RoutingSpec(workers, CAPACITY, policy, "lru")
        start = time.perf_counter()
        (ours,) = routed(requests, spec)
        ours_s = time.perf_counter() - start
        start = time.perf_counter()
        theirs = _python_fleet(paths, arrivals, ends, workers, policy)
        python_s = time.perf_counter() - start
        same = list(zip(ours.workers.tolist(), ours.hit_blocks.tolist(), strict=True)) == theirs
        found[policy] = {
            "kvtrace_s": ours_s,
            "python_s": python_s,
            "ratio": python_s / ours_s,
            "same_routing_and_hits": same,
        }
    return {"requests": sample, "block_reads": sum(map(len, hashes)), "policies": found}


def at_scale(con, workers: int, rounds: int) -> dict:
    """``routing_rows`` per policy and cache, and the kernel alone."""
    table = con.sql(
        "SELECT request_idx, hash_ids, input_tokens, hash_block_tokens, arrival_s, "
        "output_tokens, session_id::VARCHAR AS session_id FROM workload_requests "
        "ORDER BY arrival_s, request_idx"
    ).to_arrow_table()
    requests = load_requests(table)
    for cache in ("lru", "radix"):  # compiled (or loaded from numba's cache) before timing
        routed(load_requests(table.slice(0, 100)), RoutingSpec(2, 8, "all", cache))
    found = {}
    for cache in ("lru", "radix"):
        for policy in POLICIES:
            spec = RoutingSpec(workers, CAPACITY, policy, cache)
            times, kernel_times = [], []
            for _ in range(rounds):
                start = time.perf_counter()
                rows = routing_rows(con, workers, CAPACITY, policy, cache, None, None, None,
                                    30.0, 128.0, 1.0)  # fmt: skip
                times.append(time.perf_counter() - start)
                start = time.perf_counter()
                routed(requests, spec)
                kernel_times.append(time.perf_counter() - start)
            fleet = rows[0]
            found[f"{policy}/{cache}"] = {
                "in_process_s": statistics.median(times),
                "replay_only_s": statistics.median(kernel_times),
                "hit_rate": fleet["hit_rate"],
                "imbalance": fleet["imbalance"],
            }
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--sample", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvtrace-bench-routing-") as scratch:
        path = Path(scratch) / "scaled.jsonl"
        reads = scaled_trace(path, args.requests)
        warehouse = Warehouse(str(Path(scratch) / "wh"), create=True)
        start = time.perf_counter()
        ingest(warehouse, [str(path)])
        ingest_s = time.perf_counter() - start
        con = connect(Warehouse(str(Path(scratch) / "wh")))
        result = {
            "machine": machine(),
            "requests": args.requests,
            "block_reads": reads,
            "workers": args.workers,
            "capacity_blocks": CAPACITY,
            "ingest_s": ingest_s,
            "at_scale": at_scale(con, args.workers, args.rounds),
            "side_by_side": side_by_side(con, args.workers, args.sample),
        }
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "routing.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
