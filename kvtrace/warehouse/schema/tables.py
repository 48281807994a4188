"""Every warehouse table by name, with its spec (`TableSpec`: its Arrow schema and layout)."""

from kvtrace.warehouse.schema.core import (
    INGEST_CHECKS,
    QUARANTINE,
    REQUESTS,
    RUNS,
    TableSpec,
)
from kvtrace.warehouse.schema.dsa import (
    DSA_FILL_HIST,
    DSA_OFFSET_HIST,
    DSA_REQUEST_TOKENS,
    DSA_STEPS,
)
from kvtrace.warehouse.schema.dsa_prefill import DSA_PREFILL
from kvtrace.warehouse.schema.engine_metrics import ENGINE_METRICS
from kvtrace.warehouse.schema.eval import EVAL_SAMPLES, MERGE_NUMERICS, NEEDLE_SPANS
from kvtrace.warehouse.schema.kv_events import KV_EVENT_BLOCKS, KV_EVENTS
from kvtrace.warehouse.schema.operator_profiles import OPERATOR_PROFILES
from kvtrace.warehouse.schema.serving import POOL_SNAPSHOTS, REQUEST_METRICS, RUN_SUMMARIES
from kvtrace.warehouse.schema.timeline import TIMELINE_COUNTERS, TIMELINE_EVENTS
from kvtrace.warehouse.schema.workload import (
    BATCH_METRICS,
    BENCHMARK_SUMMARIES,
    REQUEST_TIMINGS,
    WORKLOAD_REQUESTS,
)

TABLES: dict[str, TableSpec] = {
    spec.name: spec
    for spec in (
        RUNS,
        REQUESTS,
        QUARANTINE,
        INGEST_CHECKS,
        DSA_STEPS,
        DSA_OFFSET_HIST,
        DSA_FILL_HIST,
        DSA_REQUEST_TOKENS,
        DSA_PREFILL,
        POOL_SNAPSHOTS,
        REQUEST_METRICS,
        RUN_SUMMARIES,
        EVAL_SAMPLES,
        NEEDLE_SPANS,
        MERGE_NUMERICS,
        WORKLOAD_REQUESTS,
        REQUEST_TIMINGS,
        BENCHMARK_SUMMARIES,
        BATCH_METRICS,
        TIMELINE_EVENTS,
        TIMELINE_COUNTERS,
        KV_EVENTS,
        KV_EVENT_BLOCKS,
        ENGINE_METRICS,
        OPERATOR_PROFILES,
    )
}

__all__ = ["TABLES", "TableSpec"]
