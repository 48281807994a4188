"""What the serving engines' own Prometheus metrics mean to kvtrace: one table per engine.

Each row maps a metric family, named as the engine names it, onto a kvtrace quantity with
its unit.  A counter is exposed as ``<family>_total``; a gauge under its family's name.
Where a label splits a quantity (vLLM's ``transfer_type`` or ``source``, SGLang's
``cache_source``), its value is the quantity's ``part``; the other labels (model, engine
index, ranks) are combined as the row says: summed, averaged (shares) or their largest
value (a count every rank reports alike).  ``value_label`` takes the value from a label
of an info gauge (vLLM's ``cache_config_info`` carries the KV pool's size there).

The names, types and labels were read from the engines' released sources:

* vLLM 0.33.0 (PyPI wheel): ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``),
  ``vllm/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py`` (the offloading
  connector's transfer metrics), ``vllm/v1/kv_offload/cpu/{spec,common}.py`` (the CPU
  tier's metrics) and ``vllm/config/cache.py`` (the info gauge's labels);
* SGLang 0.5.23 (PyPI wheel): ``sglang/srt/observability/metrics_collector.py``
  (``SchedulerMetricsCollector``, ``TokenizerMetricsCollector``, ``StorageMetricsCollector``,
  ``RadixCacheMetricsCollector``);
* LMCache 0.5.6 (PyPI wheel): ``lmcache/observability.py`` (``PrometheusLogger``).

``tests/data/engine_metrics/`` holds each engine's exposition written from those
definitions, and a test finds every family below there with its type.

`POOL_RULES` map quantities onto ``pool_snapshots``' columns: an arithmetic expression
over quantity names (``+ - * /``; a quantity an exposition lacks makes it NULL, and so
does a division by zero), the first rule that gives a value winning, truncated or
rounded to an integer.  The same rules build the ``engine_pool_snapshots`` view and the
rows ``kvtrace collect pool`` writes from a ``/metrics`` endpoint.

``python -m kvtrace.collectors.engine_metric_maps`` writes
``kvtrace/sql/queries/engine_metric_maps.sql`` (the ``engine_metric_map`` and
``engine_pool_snapshots`` views) again; a test holds it equal to this module.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = [
    "ENGINES",
    "ENGINE_METRICS",
    "POOL_RULES",
    "EngineMetric",
    "PoolRule",
    "evaluate",
    "generated_sql",
    "metrics_of",
    "sql_file",
]

Engine = Literal["vllm", "sglang", "lmcache"]
Combine = Literal["sum", "mean", "max"]
ENGINES: tuple[Engine, ...] = ("vllm", "sglang", "lmcache")


@dataclass(frozen=True)
class EngineMetric:
    """One engine metric family and the kvtrace quantity it gives."""

    engine: Engine
    family: str  # as the engine names it (and prometheus_client's parser gives it)
    kind: Literal["counter", "gauge"]
    quantity: str  # kvtrace's name
    unit: str  # tokens, requests, share (0-1), blocks, bytes, seconds, events
    meaning: str
    split_by: str | None = None  # the label whose value is the quantity's part
    combine: Combine = "sum"  # how the series of other labels add up
    value_label: str | None = None  # the value is this label's (an info gauge's fact)

    @property
    def sample(self) -> str:
        """The sample's name as exposed: a counter's ends in ``_total``."""
        return f"{self.family}_total" if self.kind == "counter" else self.family


C, G = "counter", "gauge"


def _table(engine: Engine, rows: tuple[tuple, ...]) -> tuple[EngineMetric, ...]:
    """Rows of (family without the engine's prefix, kind, quantity, unit, meaning[, how])."""
    return tuple(
        EngineMetric(engine, f"{engine}:{row[0]}", *row[1:5], **(row[5] if len(row) > 5 else {}))
        for row in rows
    )


# fmt: off
VLLM = _table("vllm", (
    ("num_requests_running", G, "running_requests", "requests",
     "requests in the running batch"),
    ("num_requests_waiting", G, "waiting_requests", "requests",
     "requests waiting to be scheduled"),
    ("num_requests_waiting_by_reason", G, "waiting_requests_by_reason", "requests",
     "waiting requests by reason: capacity or deferred",
     {"split_by": "reason"}),
    ("num_requests_kv_fetch_by_stage", G, "kv_fetch_requests", "requests",
     "waiting requests by async KV load stage (KV consumers only)",
     {"split_by": "stage"}),
    ("kv_cache_usage_perc", G, "kv_usage_share", "share",
     "share of the GPU KV cache in use",
     {"combine": "mean"}),
    ("cache_config_info", G, "kv_capacity_blocks", "blocks",
     "GPU KV cache blocks (the num_gpu_blocks label)",
     {"value_label": "num_gpu_blocks"}),
    ("cache_config_info", G, "kv_block_size_tokens", "tokens",
     "tokens per KV block (the block_size label)",
     {"combine": "max", "value_label": "block_size"}),
    ("prefix_cache_queries", C, "prefix_cache_query_tokens", "tokens",
     "prompt tokens looked up in the prefix cache"),
    ("prefix_cache_hits", C, "prefix_cache_hit_tokens", "tokens",
     "prompt tokens found in the prefix cache"),
    ("external_prefix_cache_queries", C, "external_prefix_cache_query_tokens", "tokens",
     "prompt tokens looked up through the KV connector"),
    ("external_prefix_cache_hits", C, "external_prefix_cache_hit_tokens", "tokens",
     "prompt tokens the KV connector supplied"),
    ("prompt_tokens", C, "prompt_tokens", "tokens",
     "prefill tokens processed"),
    ("prompt_tokens_by_source", C, "prompt_tokens_by_source", "tokens",
     "prompt tokens by source: computed, local cache hit or external transfer",
     {"split_by": "source"}),
    ("prompt_tokens_cached", C, "cached_prompt_tokens", "tokens",
     "cached prompt tokens, local and external"),
    ("prompt_tokens_cached_by_source", C, "cached_prompt_tokens_by_tier", "tokens",
     "prefix-cache hit tokens by the tier that supplied them: device, host, disk, p2p, "
     "external_unspecified",
     {"split_by": "source"}),
    ("generation_tokens", C, "generation_tokens", "tokens",
     "tokens generated"),
    ("num_preemptions", C, "preemptions", "events",
     "requests preempted"),
    ("kv_offload_load_bytes", C, "offload_load_bytes", "bytes",
     "bytes loaded from the offload tier into GPU"),
    ("kv_offload_load_time", C, "offload_load_seconds", "seconds",
     "time spent loading from the offload tier"),
    ("kv_offload_store_bytes", C, "offload_store_bytes", "bytes",
     "bytes stored from GPU into the offload tier"),
    ("kv_offload_store_time", C, "offload_store_seconds", "seconds",
     "time spent storing into the offload tier"),
    ("kv_offload_total_bytes", C, "offload_bytes_by_direction", "bytes",
     "bytes offloaded by transfer type, GPU_to_CPU or CPU_to_GPU (the older CPU offload "
     "metric, beside the load and store ones)",
     {"split_by": "transfer_type"}),
    ("kv_offload_total_time", C, "offload_seconds_by_direction", "seconds",
     "offload transfer time by transfer type (the older CPU offload metric)",
     {"split_by": "transfer_type"}),
    ("kv_offload_allocation_failure", C, "offload_allocation_failures", "events",
     "offload store allocations that failed"),
    ("kv_offload_stores_skipped", C, "offload_stores_skipped", "events",
     "offload stores skipped below the reuse threshold"),
    ("kv_offload_cpu_cache_usage_perc", G, "offload_cpu_pinned_share", "share",
     "share of the CPU KV cache pinned by transfers in flight",
     {"combine": "mean"}),
    ("kv_offload_cpu_cache_write_usage_perc", G, "offload_cpu_store_pinned_share", "share",
     "share of the CPU KV cache pinned by stores in flight",
     {"combine": "mean"}),
    ("kv_offload_cpu_cache_read_usage_perc", G, "offload_cpu_load_pinned_share", "share",
     "share of the CPU KV cache pinned by loads in flight",
     {"combine": "mean"}),
))
# fmt: on

# fmt: off
SGLANG = _table("sglang", (
    ("num_running_reqs", G, "running_requests", "requests",
     "requests in the running batch"),
    ("num_queue_reqs", G, "waiting_requests", "requests",
     "requests in the waiting queue"),
    ("num_retracted_reqs", G, "retracted_requests", "requests",
     "requests retracted for lack of KV memory"),
    ("num_paused_reqs", G, "paused_requests", "requests",
     "requests paused by a weight sync"),
    ("cache_hit_rate", G, "prefix_cache_hit_share", "share",
     "the prefix cache hit rate",
     {"combine": "mean"}),
    ("token_usage", G, "kv_usage_share", "share",
     "share of the KV pool in use",
     {"combine": "mean"}),
    ("num_used_tokens", G, "used_tokens", "tokens",
     "KV tokens in use"),
    ("kv_available_tokens", G, "kv_available_tokens", "tokens",
     "free token slots of the KV pool"),
    ("kv_evictable_tokens", G, "kv_evictable_tokens", "tokens",
     "evictable (radix-cached) token slots"),
    ("kv_used_tokens", G, "kv_used_tokens", "tokens",
     "token slots in active use"),
    ("max_total_num_tokens", G, "kv_capacity_tokens", "tokens",
     "the KV pool's size in tokens"),
    ("streaming_session_held_tokens", G, "session_held_tokens", "tokens",
     "KV tokens held by streaming session slots"),
    ("num_streaming_sessions", G, "streaming_sessions", "sessions",
     "streaming sessions"),
    ("hicache_host_used_tokens", G, "host_used_tokens", "tokens",
     "tokens in the host (L2) KV cache"),
    ("hicache_host_total_tokens", G, "host_capacity_tokens", "tokens",
     "the host (L2) KV cache's size"),
    ("prompt_tokens", C, "prompt_tokens", "tokens",
     "prefill tokens processed"),
    ("generation_tokens", C, "generation_tokens", "tokens",
     "tokens generated"),
    ("cached_tokens", C, "cached_prompt_tokens_by_tier", "tokens",
     "cached prompt tokens by source: device, host or storage",
     {"split_by": "cache_source"}),
    ("num_requests", C, "finished_requests", "requests",
     "requests processed"),
    ("num_retracted_requests", C, "retractions", "events",
     "requests retracted"),
    ("evicted_tokens", C, "evicted_tokens", "tokens",
     "device KV token slots freed by eviction"),
    ("load_back_tokens", C, "host_load_tokens", "tokens",
     "tokens loaded back from host DRAM (L2) to GPU, by host pool (every rank reports the "
     "same count)",
     {"split_by": "pool", "combine": "max"}),
    ("load_back_bytes", C, "host_load_bytes", "bytes",
     "bytes loaded back from host DRAM (L2) to GPU"),
    ("hicache_backup_tokens", C, "host_backup_tokens", "tokens",
     "tokens backed up from GPU to host DRAM (L2), by host pool (every rank reports the "
     "same count)",
     {"split_by": "pool", "combine": "max"}),
    ("hicache_backup_bytes", C, "host_backup_bytes", "bytes",
     "bytes backed up from GPU to host DRAM (L2)"),
    ("hicache_dropped_tokens", C, "dropped_tokens_by_reason", "tokens",
     "device KV tokens destroyed without a host backup, by reason",
     {"split_by": "reason"}),
    ("prefetched_tokens", C, "storage_prefetch_tokens", "tokens",
     "tokens moved from storage (L3) to host"),
    ("backuped_tokens", C, "storage_backup_tokens", "tokens",
     "tokens backed up from host to storage (L3)"),
    ("storage_prefetch_hit_tokens", C, "storage_hit_tokens", "tokens",
     "storage (L3) hit tokens a query returned"),
    ("storage_prefetch_unfulfilled_tokens", C, "storage_unfulfilled_tokens_by_reason", "tokens",
     "storage hit tokens that gave no usable prefetch, by reason",
     {"split_by": "reason"}),
))
# fmt: on

# fmt: off
LMCACHE = _table("lmcache", (
    ("num_retrieve_requests", C, "retrieve_requests", "requests",
     "retrieve requests sent to LMCache"),
    ("num_store_requests", C, "store_requests", "requests",
     "store requests sent to LMCache"),
    ("num_lookup_requests", C, "lookup_requests", "requests",
     "lookup requests sent to LMCache"),
    ("num_requested_tokens", C, "retrieve_query_tokens", "tokens",
     "tokens asked of LMCache's retrieve"),
    ("num_hit_tokens", C, "retrieve_hit_tokens", "tokens",
     "tokens LMCache's retrieve found"),
    ("num_lookup_tokens", C, "lookup_query_tokens", "tokens",
     "tokens asked of LMCache's lookup"),
    ("num_lookup_hits", C, "lookup_hit_tokens", "tokens",
     "tokens LMCache's lookup found"),
    ("num_stored_tokens", C, "stored_tokens", "tokens",
     "tokens stored, evicted ones included"),
    ("num_vllm_hit_tokens", C, "engine_hit_tokens", "tokens",
     "tokens the engine's own prefix cache hit"),
    ("num_prompt_tokens", C, "prompt_tokens", "tokens",
     "prompt tokens LMCache saw"),
    ("num_remote_read_bytes", C, "remote_read_bytes", "bytes",
     "bytes read from remote backends"),
    ("num_remote_write_bytes", C, "remote_write_bytes", "bytes",
     "bytes written to remote backends"),
    ("local_cpu_evict_count", C, "cpu_evictions", "events",
     "evictions in the local CPU backend"),
    ("local_cpu_evict_failed_count", C, "cpu_eviction_failures", "events",
     "failed evictions in the local CPU backend"),
    ("forced_unpin_count", C, "forced_unpins", "events",
     "objects unpinned on a timeout"),
    ("lookup_0_hit_requests", C, "zero_hit_lookups", "requests",
     "lookups that hit nothing"),
    ("remote_ping_errors", C, "remote_ping_errors", "events",
     "failed pings of remote backends"),
    ("retrieve_hit_rate", G, "retrieve_hit_share", "share",
     "retrieve hit rate since the last log",
     {"combine": "mean"}),
    ("lookup_hit_rate", G, "lookup_hit_share", "share",
     "lookup hit rate since the last log",
     {"combine": "mean"}),
    ("local_cache_usage", G, "local_cache_bytes", "bytes",
     "bytes of LMCache's local (CPU) cache in use"),
    ("remote_cache_usage", G, "remote_cache_bytes", "bytes",
     "bytes of the remote cache in use"),
    ("local_storage_usage", G, "local_storage_bytes", "bytes",
     "bytes of local storage (disk) in use"),
    ("active_memory_objs_count", G, "active_memory_objects", "objects",
     "memory objects in use"),
    ("pinned_memory_objs_count", G, "pinned_memory_objects", "objects",
     "memory objects pinned"),
    ("get_blocking_failed_count", G, "blocking_get_failures", "events",
     "blocking gets that failed (a gauge the engine keeps as a running count)"),
    ("put_failed_count", G, "put_failures", "events",
     "puts that failed (a gauge the engine keeps as a running count)"),
))
# fmt: on

ENGINE_METRICS: tuple[EngineMetric, ...] = VLLM + SGLANG + LMCACHE


def metrics_of(engine: Engine) -> tuple[EngineMetric, ...]:
    """The mapping table of one engine."""
    return tuple(metric for metric in ENGINE_METRICS if metric.engine == engine)


@dataclass(frozen=True)
class PoolRule:
    """A pool column from an engine's quantities; the first rule that gives a value wins."""

    engine: Engine
    column: str  # a pool_snapshots column
    expression: str  # + - * / over quantity names and numbers
    rounding: Literal["trunc", "round"] = "trunc"


POOL_RULES: tuple[PoolRule, ...] = (
    PoolRule("sglang", "capacity_tokens", "kv_used_tokens + kv_available_tokens"),
    PoolRule("sglang", "capacity_tokens", "used_tokens / kv_usage_share", "round"),
    PoolRule("sglang", "available_tokens", "kv_available_tokens"),
    PoolRule("sglang", "idle_evictable_tokens", "kv_evictable_tokens"),
    PoolRule("sglang", "held_tokens", "session_held_tokens"),
    PoolRule("sglang", "running_batch_size", "running_requests"),
    PoolRule("vllm", "capacity_tokens", "kv_capacity_blocks * kv_block_size_tokens"),
    PoolRule(
        "vllm",
        "available_tokens",
        "kv_capacity_blocks * kv_block_size_tokens * (1 - kv_usage_share)",
        "round",
    ),
    PoolRule("vllm", "running_batch_size", "running_requests"),
    PoolRule("lmcache", "kvcache_mem_gb", "local_cache_bytes / 1073741824"),
)


# -- evaluation (the poller) and SQL (the view) of the rules ----------------------------------

_OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


def _tree(expression: str) -> ast.expr:
    return ast.parse(expression, mode="eval").body


def evaluate(expression: str, values: Mapping[str, float]) -> float | None:
    """``expression`` over ``values``; None when a name is missing or a divisor is 0."""

    def walk(node: ast.expr) -> float | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return float(node.value)
        if isinstance(node, ast.Name):
            return values.get(node.id)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            left, right = walk(node.left), walk(node.right)
            if left is None or right is None:
                return None
            if isinstance(node.op, ast.Add):
                return left + right
            if isinstance(node.op, ast.Sub):
                return left - right
            if isinstance(node.op, ast.Mult):
                return left * right
            return left / right if right else None
        raise ValueError(f"pool rule {expression!r}: only + - * /, names and numbers")

    return walk(_tree(expression))


def _sql_expression(expression: str) -> str:
    """The same expression in SQL: names are quantity columns, a zero divisor gives NULL."""

    def walk(node: ast.expr) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return repr(float(node.value))
        if isinstance(node, ast.Name):
            return f'"{node.id}"'
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Div):
                right = f"nullif({right}, 0)"
            return f"({left} {_OPERATORS[type(node.op)]} {right})"
        raise ValueError(f"pool rule {expression!r}: only + - * /, names and numbers")

    return walk(_tree(expression))


def _quote(value: str | None) -> str:
    return "NULL" if value is None else "'" + value.replace("'", "''") + "'"


_MAP_COLUMNS = (
    "engine",
    "family",
    "sample",
    "kind",
    "quantity",
    "unit",
    "split_by",
    "combine",
    "value_label",
    "meaning",
)
_HEADER = """\
-- The serving engines' metrics that kvtrace maps, and the pool columns they give.
--
-- Generated from kvtrace/collectors/engine_metric_maps.py: do not edit by hand
-- ('python -m kvtrace.collectors.engine_metric_maps' writes this file again, and a test
-- holds the two equal).  serving_counters.sql reads the map.
--
-- engine_pool_snapshots combines each quantity's series at a scrape as the map says (sum,
-- mean or max over their labels) and evaluates the pool rules over them: the first rule of
-- the engine that gives a value fills the column, truncated or rounded (half to even) to
-- an integer for token and request counts; a rule over a quantity the scrape lacks, or
-- dividing by 0, gives none.  Worked example: a vLLM scrape with cache_config_info
-- {num_gpu_blocks="2048", block_size="16"} and kv_cache_usage_perc 0.25 gives
-- capacity_tokens 2048 x 16 = 32,768 and available_tokens 32,768 x (1 - 0.25) = 24,576.

-- @requires engine_metrics.sql
"""


def _map_sql() -> str:
    rows = ",\n".join(
        "    ("
        + ", ".join(
            _quote(value)
            for value in (
                m.engine,
                m.family,
                m.sample,
                m.kind,
                m.quantity,
                m.unit,
                m.split_by,
                m.combine,
                m.value_label,
                m.meaning,
            )
        )
        + ")"
        for m in ENGINE_METRICS
    )
    return "\n".join(
        [
            "-- @view engine_metric_map",
            "-- Which engine metric gives which kvtrace quantity",
            "-- (kvtrace/collectors/engine_metric_maps.py).",
            "-- @column engine       vllm, sglang or lmcache",
            "-- @column family       the metric family as the engine names it",
            "-- @column sample       the sample's name as exposed (a counter's ends in _total)",
            "-- @column kind         counter or gauge",
            "-- @column quantity     kvtrace's name for it",
            "-- @column unit         tokens, requests, share (0-1), blocks, bytes, seconds, events",
            "-- @column split_by     the label whose value is the quantity's part (NULL: none)",
            "-- @column combine      how the series of its other labels add up: sum, mean or max",
            "-- @column value_label  the label holding the value (an info gauge's fact), else NULL",
            "-- @column meaning      what it counts",
            "CREATE VIEW engine_metric_map AS",
            f"SELECT * FROM (VALUES\n{rows}\n) AS m({', '.join(_MAP_COLUMNS)});",
        ]
    )


_KEYS = ("run_id", "experiment", "worker_id", "t_s", "ts")
_POOL_DOCS = {
    "run_id": "the run",
    "experiment": "experiment label",
    "worker_id": "the scraped endpoint's name",
    "t_s": "seconds since the run's first scrape",
    "ts": "when the scrape was taken (UTC)",
    "capacity_tokens": "KV pool size in tokens",
    "available_tokens": "free KV tokens",
    "idle_evictable_tokens": "evictable (radix-cached) tokens",
    "held_tokens": "tokens held by streaming sessions",
    "running_batch_size": "requests in the running batch",
    "kvcache_mem_gb": "KV cache memory in use, GiB (LMCache's local cache)",
}


def _pool_column(column: str, integer: bool) -> str | None:
    """The select-list entry of one pool column: its engines' rules, first value wins."""
    cases = []
    for rule in (r for r in POOL_RULES if r.column == column):
        value = _sql_expression(rule.expression)
        if integer:
            value = f"round_even({value}, 0)" if rule.rounding == "round" else f"trunc({value})"
        cases.append(f"CASE WHEN engine = '{rule.engine}' THEN {value} END")
    if not cases:
        return None
    joined = ",\n        ".join(cases)
    kind = "BIGINT" if integer else "DOUBLE"
    return f"    CAST(coalesce(\n        {joined}\n    ) AS {kind}) AS {column}"


def _pool_sql() -> str:
    from kvtrace.warehouse.schema.serving import POOL_SNAPSHOTS

    names = sorted(
        {
            node.id
            for rule in POOL_RULES
            for node in ast.walk(_tree(rule.expression))
            if isinstance(node, ast.Name)
        }
    )
    pivot = ",\n".join(
        f"        max(value) FILTER (WHERE quantity = '{name}') AS \"{name}\"" for name in names
    )
    columns, documented = [], [*_KEYS[:3], "engine", *_KEYS[3:]]
    for field in POOL_SNAPSHOTS.schema:
        if field.name not in _KEYS:
            entry = _pool_column(field.name, str(field.type) == "int64")
            if entry:
                columns.append(entry)
                documented.append(field.name)
    docs = [
        f"-- @column {name:<22} {_POOL_DOCS.get(name, 'vllm, sglang or lmcache')}"
        for name in documented
    ]
    quoted = ", ".join(f"'{name}'" for name in names)
    return "\n".join(
        [
            "-- @view engine_pool_snapshots",
            "-- pool_snapshots' columns from the engines' own metrics: one row per (run, worker,",
            "-- engine, scrape) that holds a quantity a pool rule reads.  The rules are",
            "-- engine_metric_maps.POOL_RULES (the guide lists them); a column no rule of the",
            "-- engine fills is NULL, never 0.",
            *docs,
            "CREATE VIEW engine_pool_snapshots AS",
            "WITH series AS (",
            "    SELECT e.run_id, e.experiment, e.worker_id, e.ts, e.t_s, m.engine, m.quantity,",
            "           m.combine, CASE WHEN m.value_label IS NULL THEN e.value",
            "               ELSE TRY_CAST(e.labels->>m.value_label AS DOUBLE) END AS value",
            "    FROM engine_metrics AS e JOIN engine_metric_map AS m ON e.metric = m.sample",
            f"    WHERE m.quantity IN ({quoted})",
            "), combined AS (",
            "    SELECT run_id, any_value(experiment) AS experiment, worker_id, ts,",
            "           min(t_s) AS t_s, engine, quantity,",
            "           CASE any_value(combine) WHEN 'mean' THEN avg(value)",
            "               WHEN 'max' THEN max(value) ELSE sum(value) END AS value",
            "    FROM series GROUP BY run_id, worker_id, ts, engine, quantity",
            "), quantities AS (",
            "    SELECT run_id, any_value(experiment) AS experiment, worker_id, engine,",
            "           min(t_s) AS t_s, ts,",
            pivot,
            "    FROM combined GROUP BY run_id, worker_id, engine, ts",
            ")",
            "SELECT run_id, experiment, worker_id, engine, t_s, ts,",
            ",\n".join(columns),
            "FROM quantities",
            "ORDER BY run_id, worker_id, engine, ts;",
        ]
    )


def generated_sql() -> str:
    """The text of ``engine_metric_maps.sql``."""
    return f"{_HEADER}\n{_map_sql()}\n\n{_pool_sql()}\n"


def sql_file() -> Path:
    """Where ``engine_metric_maps.sql`` lives in the source tree (found beside this package,
    not imported: the collectors never import the SQL library)."""
    return Path(__file__).resolve().parents[1] / "sql" / "queries" / "engine_metric_maps.sql"


if __name__ == "__main__":  # python -m kvtrace.collectors.engine_metric_maps
    sql_file().write_text(generated_sql())
    sys.stdout.write(f"wrote {sql_file()}\n")
