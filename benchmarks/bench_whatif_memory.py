"""Peak memory of the what-if as the trace grows: it should stay flat.

    python benchmarks/bench_whatif_memory.py [--gb 0.2 0.4 0.9] [--block-size 16 64]

Generates one seed-format DSA trace of about 0.23 GB (`bench_warehouse.write_dsa_trace`:
61 layers, 16 decode steps a request, 2048 positions a row) and grows it to each size by
repeating its requests under new request ids (`grown_trace`), ingests each into its own
warehouse, then runs ``kvtrace whatif`` as a fresh process under GNU time for every
granularity (block, layer_block), block size, and pool (private, a cache per request;
shared by content, one pool).  Prints a Markdown table of peak RSS, seconds and accesses
per second with the machine described, and writes ``benchmarks/out/whatif_memory.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
from pathlib import Path

from bench_warehouse import KVTRACE, machine, process, write_dsa_trace

HERE = Path(__file__).parent
BASE_MB = 233
POOLS = {"private": [], "shared by content": ["--sharing", "content"]}
_REQUEST_ID = re.compile(rb'"request_id":(\d+)')


def grown_trace(base: Path, out: Path, copies: int) -> None:
    """Write ``base``'s records ``copies`` times to ``out``, each copy's request ids moved
    past the previous copy's (unless a file of that size is there)."""
    size = base.stat().st_size * copies
    if out.exists() and out.stat().st_size == size:
        return
    lines = base.read_bytes().splitlines(keepends=True)
    span = 1 + max(int(m[1]) for line in lines if (m := _REQUEST_ID.search(line)))
    partial = out.with_suffix(".partial")
    with partial.open("wb") as sink:
        for copy in range(copies):

            def moved(match: re.Match[bytes], shift: int = copy * span) -> bytes:
                return b'"request_id":%d' % (int(match[1]) + shift)

            for line in lines:
                sink.write(_REQUEST_ID.sub(moved, line, 1))
    partial.replace(out)


def accesses(warehouse: Path, args: list[str]) -> int:
    """The accesses the what-if replays (its runs table's column)."""
    done = subprocess.run(
        [KVTRACE, "-q", "-w", str(warehouse), "whatif", *args, "--table", "runs", "-f", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return sum(row["accesses"] for row in json.loads(done.stdout))


def measure(scratch: Path, sizes: list[float], block_sizes: list[int]) -> list[dict]:
    base = scratch / f"dsa-{BASE_MB}mb.jsonl"
    write_dsa_trace(base, BASE_MB)
    rows = []
    for gb in sizes:
        copies = max(1, round(gb * 1e9 / base.stat().st_size))
        trace = scratch / f"dsa-x{copies}.jsonl"
        grown_trace(base, trace, copies)
        warehouse = scratch / f"wh-x{copies}"
        if not warehouse.exists():
            process([KVTRACE, "-q", "-w", str(warehouse), "ingest", str(trace)])
        for granularity in ("block", "layer_block"):
            for block_size in block_sizes:
                for pool, extra in POOLS.items():
                    args = ["--granularity", granularity, "--block-size", str(block_size), *extra]
                    run = process([KVTRACE, "-q", "-w", str(warehouse), "whatif", *args])
                    count = accesses(warehouse, args)
                    rows.append(
                        {
                            "trace_gb": trace.stat().st_size / 1e9,
                            "granularity": granularity,
                            "block_size": block_size,
                            "pool": pool,
                            "accesses": count,
                            "seconds": run.wall,
                            "cpu_seconds": run.cpu,
                            "peak_rss_mb": run.peak_rss_mb,
                        }
                    )
                    print(rows[-1], flush=True)
    return rows


def markdown(rows: list[dict]) -> str:
    lines = [
        f"Machine: {machine()}",
        "",
        "| trace | granularity | B | pool | accesses | seconds | M accesses/s | peak RSS |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        rate = r["accesses"] / r["seconds"] / 1e6
        lines.append(
            f"| {r['trace_gb']:.2f} GB | {r['granularity']} | {r['block_size']} | {r['pool']} "
            f"| {r['accesses'] / 1e6:.1f} M | {r['seconds']:.1f} | {rate:.1f} "
            f"| {r['peak_rss_mb']:.0f} MB |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gb", type=float, nargs="+", default=[0.2, 0.4, 0.9])
    parser.add_argument("--block-size", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--scratch", help="a folder to keep the traces in between runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        scratch = Path(args.scratch or temporary)
        scratch.mkdir(parents=True, exist_ok=True)
        rows = measure(scratch, args.gb, args.block_size)
    table = markdown(rows)
    print(table)
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "whatif_memory.json").write_text(json.dumps({"machine": machine(), "rows": rows}))


if __name__ == "__main__":
    main()
