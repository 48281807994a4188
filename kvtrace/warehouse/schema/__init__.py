"""The warehouse tables: their names here (known without loading Arrow), their Arrow
schemas in one module per trace family, all of them in `kvtrace.warehouse.schema.tables`.

A command that only reads names what it reads by these names; the schemas load with
the code that writes or checks files.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

__all__ = ["JOURNAL", "LOCK_TABLE", "TABLE_NAMES", "schema_digest"]

JOURNAL = "_commits"  # the warehouse's journal table (`kvtrace.warehouse._journal`)
LOCK_TABLE = "_locks"  # run locks on an object store (`kvtrace.warehouse._object_lock`)
TABLE_NAMES: tuple[str, ...] = (
    "runs",
    "requests",
    "quarantine",
    "ingest_checks",
    "dsa_steps",
    "dsa_offset_hist",
    "dsa_fill_hist",
    "dsa_request_tokens",
    "dsa_prefill",
    "pool_snapshots",
    "request_metrics",
    "run_summaries",
    "eval_samples",
    "needle_spans",
    "merge_numerics",
    "workload_requests",
    "request_timings",
    "benchmark_summaries",
    "batch_metrics",
    "timeline_events",
    "timeline_counters",
    "kv_events",
    "kv_event_blocks",
    "engine_metrics",
    "operator_profiles",
)
"""Every table's name, in the order of `kvtrace.warehouse.schema.tables.TABLES` (a test
holds the two together)."""


@cache
def schema_digest() -> str:
    """A digest of the modules that define the tables' schemas: it changes whenever a
    kvtrace release may change a schema (what is built for one schema is built again)."""
    digest = hashlib.sha256()
    for module in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(module.name.encode() + b"\0" + module.read_bytes() + b"\0")
    return digest.hexdigest()
