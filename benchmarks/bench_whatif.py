"""What-if benchmark: kvtrace's cache simulation against an OrderedDict LRU, in one run.

    python benchmarks/bench_whatif.py --requests 32 --steps 256

Traces a synthetic DSA workload (16 layers, top-2048 of a 16k-token context; the
selections of `kvtrace.synthetic`) into a temporary warehouse with the live tracer, then
on the same access stream (block size 64, one cache per request) measures, in
interleaved rounds:

1. the LRU stack-distance pass alone (`kvtrace.kernels.cache_sim.LruStack`), in accesses
   per second on one core, at granularity block and layer_block;
2. a 16-capacity LRU sweep: kvtrace (one stack-distance pass, every capacity) against
   what a researcher would write, an ``OrderedDict`` LRU simulated once per capacity;
3. the whole ``dsa_hit_curve`` query (reading the trace and building the stream
   included) for the same sweep.

Prints medians with their spread, checks that both give the same hits, and writes the
figures as JSON to ``benchmarks/out/``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np
from bench_warehouse import machine

from kvtrace import connect
from kvtrace.analysis.kv_access.stream import read_pieces, run_layouts
from kvtrace.collectors.dsa_tracer import DsaTracer
from kvtrace.kernels.cache_sim import LruStack
from kvtrace.synthetic import dsa_selection
from kvtrace.warehouse import Warehouse

HERE = Path(__file__).parent
BLOCK_SIZE = 64
CAPACITIES = [16, 24, 32, 48, 64, 96, 128, 160, 192, 208, 224, 232, 240, 248, 256, 512]


def trace(root: Path, requests: int, steps: int, layers: int, prompt: int) -> Warehouse:
    warehouse = Warehouse(root, create=True)
    rng = np.random.default_rng(0)
    with DsaTracer(
        warehouse,
        run_name="bench-whatif",
        dataset="synthetic-bench",
        block_sizes=(BLOCK_SIZE,),
        topk=2048,
    ) as tracer:
        for request in range(requests):
            tracer.begin_request(request, list(range(prompt)))
            segments = [
                (int(rng.integers(0, prompt)), int(rng.integers(16, 200))) for _ in range(4)
            ]
            for step in range(prompt, prompt + steps):
                with tracer.step(step):
                    for layer in range(layers):
                        tracer.record_topk(
                            layer, dsa_selection(rng, step + 1, 2048, layer, segments)
                        )
            tracer.end_request(request, new_tokens=steps)
    return warehouse


def streams(con, granularity: str) -> list[np.ndarray]:
    layouts = run_layouts(con, BLOCK_SIZE, granularity)
    units: dict[int, list[np.ndarray]] = {}
    for piece in read_pieces(con, BLOCK_SIZE, granularity, "request", layouts):
        units.setdefault(piece.request_id, []).append(piece.keys)
    return [np.concatenate(parts) for parts in units.values()]


def kvtrace_sweep(units: list[np.ndarray]) -> list[int]:
    hits = np.zeros(len(CAPACITIES), dtype=np.int64)
    for keys in units:
        distances = LruStack().distances(keys)
        reused = np.bincount(distances[distances >= 0])
        cumulative = np.concatenate(([0], np.cumsum(reused)))
        hits += cumulative[np.minimum(CAPACITIES, len(reused))]
    return hits.tolist()


def ordered_dict_sweep(units: list[list[int]]) -> list[int]:
    """One OrderedDict LRU per capacity and request, the way it is usually written."""
    totals = []
    for capacity in CAPACITIES:
        hits = 0
        for keys in units:
            cache: OrderedDict = OrderedDict()
            for key in keys:
                if key in cache:
                    cache.move_to_end(key)
                    hits += 1
                else:
                    cache[key] = True
                    if len(cache) > capacity:
                        cache.popitem(last=False)
        totals.append(hits)
    return totals


def timed(work) -> tuple[float, object]:
    start = time.perf_counter()
    result = work()
    return time.perf_counter() - start, result


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} s ({min(values):.3f}-{max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--prompt", type=int, default=16000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--warehouse",
        type=Path,
        default=None,
        help="Reuse the warehouse an earlier run traced (its sizes win)",
    )
    args = parser.parse_args()
    if args.warehouse is not None and args.warehouse.exists():
        trace_s, warehouse = 0.0, Warehouse(args.warehouse)
    else:
        root = args.warehouse or Path(tempfile.mkdtemp(prefix="kvtrace-bench-whatif-")) / "wh"
        trace_s, warehouse = timed(
            lambda: trace(root, args.requests, args.steps, args.layers, args.prompt)
        )
    con = connect(warehouse)
    blocks = streams(con, "block")
    layer_blocks = streams(con, "layer_block")
    as_lists = [keys.tolist() for keys in blocks]
    accesses = sum(len(k) for k in blocks)
    layer_accesses = sum(len(k) for k in layer_blocks)
    print(
        f"traced {args.requests} requests x {args.steps} steps x {args.layers} layers in "
        f"{trace_s:.0f} s: {accesses:,} block accesses, {layer_accesses:,} layer-block "
        "accesses"
    )
    kvtrace_sweep(blocks[:1])  # compile (numba caches the machine code on disk)

    sql = (
        f"SELECT capacity_blocks, hits FROM dsa_hit_curve({BLOCK_SIZE}, 'lru', "
        f"capacities := {CAPACITIES}) WHERE list_contains({CAPACITIES}, capacity_blocks) "
        "ORDER BY capacity_blocks"
    )
    times: dict[str, list[float]] = {
        "pass_block": [],
        "pass_layer_block": [],
        "kvtrace_sweep": [],
        "ordered_dict_sweep": [],
        "hit_curve_query": [],
    }
    for _ in range(args.rounds):  # interleaved, so a noisy stretch hits every variant
        times["pass_block"].append(timed(lambda: [LruStack().distances(k) for k in blocks])[0])
        times["pass_layer_block"].append(
            timed(lambda: [LruStack().distances(k) for k in layer_blocks])[0]
        )
        seconds, ours = timed(lambda: kvtrace_sweep(blocks))
        times["kvtrace_sweep"].append(seconds)
        seconds, theirs = timed(lambda: ordered_dict_sweep(as_lists))
        times["ordered_dict_sweep"].append(seconds)
        seconds, curve = timed(lambda: con.execute(sql).fetchall())
        times["hit_curve_query"].append(seconds)
        assert ours == theirs == [hits for _, hits in sorted(curve)], (ours, theirs, curve)

    median = {name: statistics.median(values) for name, values in times.items()}
    figures = {
        "machine": machine(),
        "accesses": accesses,
        "layer_block_accesses": layer_accesses,
        "capacities": CAPACITIES,
        "seconds": times,
        "pass_block_maccesses_per_s": accesses / median["pass_block"] / 1e6,
        "pass_layer_block_maccesses_per_s": layer_accesses / median["pass_layer_block"] / 1e6,
        "sweep_speedup": median["ordered_dict_sweep"] / median["kvtrace_sweep"],
        "query_speedup": median["ordered_dict_sweep"] / median["hit_curve_query"],
    }
    print(f"\nMachine: {machine()}\n")
    print(
        f"| measure ({args.rounds} interleaved rounds, median (min-max)) | kvtrace | "
        "baseline | ratio |\n|---|---|---|---|"
    )
    print(
        f"| stack-distance pass, {accesses:,} block accesses | {spread(times['pass_block'])}"
        f" = {figures['pass_block_maccesses_per_s']:.1f} M accesses/s | | |"
    )
    print(
        f"| stack-distance pass, {layer_accesses:,} layer-block accesses | "
        f"{spread(times['pass_layer_block'])} = "
        f"{figures['pass_layer_block_maccesses_per_s']:.1f} M accesses/s | | |"
    )
    print(
        f"| 16-capacity LRU sweep | {spread(times['kvtrace_sweep'])} | OrderedDict per "
        f"capacity: {spread(times['ordered_dict_sweep'])} | "
        f"{figures['sweep_speedup']:.0f}x |"
    )
    print(
        f"| the same sweep as `dsa_hit_curve` (reads the trace) | "
        f"{spread(times['hit_curve_query'])} | the OrderedDict sweep alone | "
        f"{figures['query_speedup']:.0f}x |"
    )
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "whatif.json").write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
