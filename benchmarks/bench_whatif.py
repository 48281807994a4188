"""What-if benchmark: a shared, content-addressed KV pool against the private one and
against a brute-force simulator, in one run.

    python benchmarks/bench_whatif.py                 # traces the workload (about 6 min)
    python benchmarks/bench_whatif.py --warehouse WH  # a warehouse traced before

The workload (`whatif_workload`): 32 requests decoding 256 steps in batches of 8, each
reading one of 4 documents of 12,288 shared tokens, 16 layers, top-2048, block size 64:
2.07 M block accesses, 29.4 M layer-block accesses.  In interleaved rounds it measures:

1. ``kvtrace whatif`` at granularity layer_block, in this process and as a user runs it
   (a fresh ``kvtrace`` process, its peak RSS read by GNU time): the private pool of
   one cache per request (the what-if as it was), one private pool for the run, and one
   pool shared by content;
2. the shared pool at granularity block against a brute-force exclusive LRU hierarchy
   written with ``OrderedDict`` (HBM and host tiers, demotion and promotion) over the
   same stream read from ``dsa_access`` (the read included, as the what-if includes
   its own): the same tier counts, and the time of each;
3. SHARDS: the exact LRU curve against ``sample`` 0.1 and 0.01, mean absolute error of
   the hit rate over 100 evenly spaced capacities and the time of each, on the shared
   pool's layer-block stream and on a synthetic Zipf stream of 20 M accesses over 4 M
   items (where a 1 % sample holds 28,000 items).

Prints medians and writes the figures as JSON to ``benchmarks/out/whatif.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np
from bench_warehouse import KVTRACE, machine, process
from whatif_workload import trace

from kvtrace import connect
from kvtrace.analysis.kv_access._passes import Counts, LruPass
from kvtrace.analysis.kv_access.curves import hit_curve_rows
from kvtrace.analysis.kv_access.plan import StreamSpec
from kvtrace.analysis.kv_access.whatif import WhatIfSpec, whatif
from kvtrace.warehouse import Warehouse

HERE = Path(__file__).parent
POOLS = {
    "private, a cache per request": ("request", "private"),
    "private, one pool": ("run", "private"),
    "shared by content, one pool": ("run", "content"),
}
HBM, HOST = 4096, 65536  # the default tiers' capacities, in items


def median_seconds(function: Callable[[], object], rounds: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def command(warehouse: str, *args: str) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one fresh ``kvtrace`` process."""
    run = process([KVTRACE, "-q", "-w", warehouse, *args])
    return run.wall, run.peak_rss_mb


def pools(con, warehouse: str, rounds: int) -> dict:
    figures = {}
    for name, (scope, sharing) in POOLS.items():
        spec = WhatIfSpec(granularity="layer_block", scope=scope, sharing=sharing)
        seconds, result = median_seconds(lambda spec=spec: whatif(con, spec), rounds)
        accesses = int(result.runs["accesses"][0].as_py())
        args = ["whatif", "--granularity", "layer_block", "--scope", scope, "--sharing", sharing]
        runs = [command(warehouse, *args) for _ in range(rounds)]
        cli = statistics.median(r[0] for r in runs)
        figures[name] = {
            "accesses": accesses,
            "in_process_s": seconds,
            "in_process_maccesses_per_s": accesses / seconds / 1e6,
            "command_s": cli,
            "command_maccesses_per_s": accesses / cli / 1e6,
            "command_peak_rss_mb": max((r[1] for r in runs if r[1]), default=None),
            "tier_hit_rates": dict(
                zip(
                    result.tiers["tier"].to_pylist(),
                    result.tiers["hit_rate"].to_pylist(),
                    strict=True,
                )
            ),
            "shared_hits": int(result.runs["shared_hits"][0].as_py()),
        }
    return figures


def brute_force_tiers(items: list[int]) -> list[int]:
    """Accesses served by HBM, host and remote: an exclusive LRU hierarchy, by hand."""
    hbm: OrderedDict[int, None] = OrderedDict()
    host: OrderedDict[int, None] = OrderedDict()
    served = [0, 0, 0]
    for item in items:
        if item in hbm:
            served[0] += 1
            hbm.move_to_end(item)
            continue
        if item in host:
            served[1] += 1
            del host[item]
        else:
            served[2] += 1
        hbm[item] = None
        if len(hbm) > HBM:
            demoted, _ = hbm.popitem(last=False)
            host[demoted] = None
            if len(host) > HOST:
                host.popitem(last=False)
    return served


def brute_force(con) -> list[int]:
    """What a researcher would write: read the shared pool's stream, loop over it."""
    rows = con.sql(
        "SELECT items FROM dsa_access(64, 'block', 'content') ORDER BY pool_step, request_id"
    ).fetchall()
    return brute_force_tiers([item for (listed,) in rows for item in listed])


def against_brute_force(con, rounds: int) -> dict:
    spec = WhatIfSpec(granularity="block", scope="run", sharing="content")
    ours, result = median_seconds(lambda: whatif(con, spec), rounds)
    theirs, served = median_seconds(lambda: brute_force(con), 1)
    kvtrace_served = result.tiers["accesses_served"].to_pylist()
    if kvtrace_served != served:
        raise SystemExit(f"tier counts differ: kvtrace {kvtrace_served}, brute force {served}")
    return {
        "accesses": sum(served),
        "tiers_served": served,
        "kvtrace_whatif_s": ours,
        "brute_force_s": theirs,
        "speedup": theirs / ours,
    }


def _errors(exact: np.ndarray, estimate: np.ndarray) -> dict:
    return {
        "mae": float(np.abs(exact - estimate).mean()),
        "max": float(np.abs(exact - estimate).max()),
    }


def shards_on_the_pool(con) -> dict:
    spec = StreamSpec(64, "layer_block", "run", "content")
    span = max(r["capacity_blocks"] for r in hit_curve_rows(con, spec, "lru"))
    capacities = np.unique(np.linspace(1, span, 100).astype(np.int64)).tolist()
    figures: dict = {"capacities": len(capacities)}
    exact = None
    for rate in (1.0, 0.1, 0.01):
        sampled = StreamSpec(64, "layer_block", "run", "content", sample=rate)
        seconds, rows = median_seconds(
            lambda s=sampled: hit_curve_rows(con, s, "lru", capacities), 1
        )
        curve = np.array([r["hit_rate"] for r in rows if r["capacity_blocks"] in capacities])
        exact = curve if exact is None else exact
        figures[str(rate)] = {"seconds": seconds, **_errors(exact, curve)}
    return figures


def shards_on_zipf(accesses: int = 20_000_000, items: int = 4_000_000) -> dict:
    rng = np.random.default_rng(11)
    weights = 1.0 / np.arange(1, items + 1) ** 0.8
    stream = rng.choice(items, size=accesses, p=weights / weights.sum()).astype(np.int64)
    capacities = np.unique(np.linspace(1, items, 100).astype(np.int64))
    figures: dict = {"accesses": accesses, "items": items, "distinct": len(np.unique(stream))}
    exact = None
    for rate in (1.0, 0.1, 0.01):
        start = time.perf_counter()
        lru = LruPass(np.zeros(0, np.int64), rate)
        counts = Counts(np.zeros((1, 1), np.int64), np.zeros(1, np.int64), None, None)
        for first in range(0, accesses, 1 << 20):
            chunk = stream[first : first + (1 << 20)]
            lru.feed(chunk, np.zeros(len(chunk), bool), np.zeros(len(chunk), np.int64), counts)
        curve = lru.finish(capacities).named_hits / accesses
        seconds = time.perf_counter() - start
        exact = curve if exact is None else exact
        figures[str(rate)] = {"seconds": seconds, **_errors(exact, curve)}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--warehouse", help="a warehouse holding the workload's trace")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = args.warehouse or str(Path(scratch) / "wh")
        if not args.warehouse:
            trace(Path(root))
        con = connect(Warehouse(root))
        figures = {
            "machine": machine(),
            "pools_layer_block": pools(con, root, args.rounds),
            "brute_force_block": against_brute_force(con, args.rounds),
            "shards_pool_layer_block": shards_on_the_pool(con),
            "shards_zipf": shards_on_zipf(),
        }
    out = HERE / "out" / "whatif.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
