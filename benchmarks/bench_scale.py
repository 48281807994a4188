"""A DSA trace of about 10 GB end to end on one machine: the capacity plan measured.

    python benchmarks/bench_scale.py [--gb 10] [--scratch DIR] [--ray]

Grows the 0.23 GB seed-format trace of `bench_whatif_memory` to ``--gb`` GB (its requests
repeated under new request ids), then runs each step as a user would, a fresh ``kvtrace``
process under GNU time: ingest; ``dsa_summary``; the what-if at block sizes 64 and 128
(one pool shared by content); the shared pool's LRU hit curve exactly and from a 1 %
sample.  With ``--ray`` the what-if at 64 runs again on a local Ray cluster's workers
(shares by request range) and its rows are compared with the local run's, byte for byte.
Prints a Markdown table of seconds, CPU seconds and peak RSS per step with the machine
described, and writes ``benchmarks/out/scale.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from bench_warehouse import KVTRACE, Run, machine, process, write_dsa_trace
from bench_whatif_memory import BASE_MB, grown_trace

HERE = Path(__file__).parent
WHATIF = ["whatif", "--sharing", "content", "--table", "combined", "-f", "json"]
HIT_CURVE = ["hit-curve", "--sharing", "content", "--block-size", "64", "-f", "csv"]


def steps(warehouse: Path, trace: Path, scratch: Path) -> dict[str, list[str]]:
    """Each step's command line (outputs written under ``scratch``)."""
    base = [KVTRACE, "-q", "-w", str(warehouse)]
    return {
        "ingest": [*base, "ingest", str(trace)],
        "dsa_summary": [*base, "sql", "SELECT count(*) FROM dsa_summary"],
        "what-if, B = 64": [*base, *WHATIF, "--block-size", "64", "-o", str(scratch / "w64.json")],
        "what-if, B = 128": [
            *base,
            *WHATIF,
            "--block-size",
            "128",
            "-o",
            str(scratch / "w128.json"),
        ],
        "hit curve, exact": [*base, *HIT_CURVE, "-o", str(scratch / "curve.csv")],
        "hit curve, 1 % sample": [
            *base,
            *HIT_CURVE,
            "--sample",
            "0.01",
            "-o",
            str(scratch / "sampled.csv"),
        ],
    }


def ray_step(warehouse: Path, scratch: Path) -> tuple[str, Run, bool]:
    """The what-if at 64 on Ray's workers, and whether its rows equal the local run's."""
    out = scratch / "w64-ray.json"
    run = process(
        [
            KVTRACE,
            "-q",
            "-w",
            str(warehouse),
            *WHATIF,
            "--block-size",
            "64",
            "--engine",
            "ray",
            "-o",
            str(out),
        ]
    )
    same = out.read_bytes() == (scratch / "w64.json").read_bytes()
    return "what-if, B = 64, Ray engine", run, same


def measure(scratch: Path, gb: float, ray: bool) -> dict:
    base = scratch / f"dsa-{BASE_MB}mb.jsonl"
    write_dsa_trace(base, BASE_MB)
    copies = max(1, round(gb * 1e9 / base.stat().st_size))
    trace = scratch / f"dsa-x{copies}.jsonl"
    grown_trace(base, trace, copies)
    warehouse = scratch / f"scale-wh-x{copies}"
    shutil.rmtree(warehouse, ignore_errors=True)  # the ingest is measured into a new one
    rows = []
    for name, command in steps(warehouse, trace, scratch).items():
        run = process(command)
        rows.append({"step": name, "seconds": run.wall, "cpu": run.cpu, "rss": run.peak_rss_mb})
        print(rows[-1], flush=True)
    identical = None
    if ray:
        name, run, identical = ray_step(warehouse, scratch)
        rows.append({"step": name, "seconds": run.wall, "cpu": run.cpu, "rss": run.peak_rss_mb})
    return {"trace_gb": trace.stat().st_size / 1e9, "rows": rows, "ray_identical": identical}


def markdown(result: dict) -> str:
    lines = [
        f"Machine: {machine()}; trace {result['trace_gb']:.1f} GB of seed-format JSONL",
        "",
        "| step | seconds | CPU seconds | peak RSS |",
        "|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(f"| {r['step']} | {r['seconds']:.0f} | {r['cpu']:.0f} | {r['rss']:.0f} MB |")
    if result["ray_identical"] is not None:
        verdict = "identical" if result["ray_identical"] else "DIFFERENT"
        lines += ["", f"Ray engine's what-if rows against the local run's: {verdict}."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gb", type=float, default=10.0)
    parser.add_argument("--scratch", help="a folder to keep the trace in between runs")
    parser.add_argument("--ray", action="store_true", help="also run the what-if on Ray")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        scratch = Path(args.scratch or temporary)
        scratch.mkdir(parents=True, exist_ok=True)
        result = measure(scratch, args.gb, args.ray)
    print(markdown(result))
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "scale.json").write_text(json.dumps({"machine": machine(), **result}))


if __name__ == "__main__":
    main()
