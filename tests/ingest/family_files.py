"""A small file of each trace family, for tests that run across them all."""

from __future__ import annotations

import shutil
from pathlib import Path

from kvtrace.ingest.families import kind_names
from tests.conftest import DATA, seed_record, write_jsonl
from tests.serving.fixtures import pool_rows, request_rows
from tests.timeline.nsys_export import example


def family_file(folder: Path, family: str) -> Path:
    """A small file of ``family`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    copied = {
        "workload": ("mooncake_conversation_trace.jsonl", "arrivals.jsonl"),
        "benchmark": ("workload/vllm_bench_example.json", "vllm_bench.json"),
        "timeline": ("kineto_sampled_rank0.json.gz", "rank0.pt.trace.json.gz"),
        "kv-events": ("kv_events/mooncake_lru600_events.jsonl", "events.jsonl"),
        "numerics": ("numerics/merge_numerics_example.jsonl", "numerics.jsonl"),
        "metrics": ("prometheus/exposition_formats_example.prom", "gpu0.prom"),
        "counters": ("offload/counters.jsonl", "offload_counters.jsonl"),
        "vidur-profile": ("vidur/network/a100_dgx/all_reduce.csv", "all_reduce.csv"),
    }
    if family in copied:
        source, name = copied[family]
        return Path(shutil.copy(DATA / source, folder / name))
    if family == "nsys":  # an Nsight Systems export with the documented schema
        return example().write(folder / "rank0.sqlite")
    if family == "summary":
        path = folder / "exp2_summary.json"
        path.write_text('{"requests": 4449, "errors": 415}')
        return path
    records = {
        "dsa": lambda: [seed_record(r, layer, 99, [1, 5]) for r in range(3) for layer in range(2)],
        "pool": lambda: pool_rows(3)[:12],
        "requests": lambda: request_rows()[:12],
        "eval": lambda: [{"index": i, "pred": "7", "outputs": ["7"]} for i in range(5)],
    }[family]()
    return write_jsonl(folder / f"{family}_trace.jsonl", records)


FAMILIES = kind_names()
