"""Turn one poll response into a pool snapshot row.

Two sources are understood:

* the instrumented ``/server_info`` of the serving study: JSON whose
  ``internal_states[i].session_cache`` holds the pool fields (and, at the state level,
  ``kvcache_mem_gb`` and ``last_gen_throughput``); a server with several internal states
  (data-parallel ranks) gives one row per state, worker id ``<name>#<i>``;
* an engine's Prometheus ``/metrics`` text (vLLM, SGLang, LMCache, or vLLM with LMCache
  inside it), parsed by prometheus_client and turned into pool columns by the rules of
  `kvtrace.collectors.engine_metric_maps` (``POOL_RULES``, over the quantities of its
  ``ENGINE_METRICS``): the series of one metric are combined as its map row says (summed;
  shares averaged), and a column takes the first of its engine's rules that gives a value.
  SGLang's capacity is kv_used_tokens + kv_available_tokens, else num_used_tokens /
  token_usage; vLLM's is num_gpu_blocks x block_size of cache_config_info, its available
  tokens that capacity x (1 - kv_cache_usage_perc); LMCache gives kvcache_mem_gb from
  its local cache's bytes.  A sample a rule reads that is not a finite number is a
  malformed response.
"""

from __future__ import annotations

import ast
import json
import math

from kvtrace.collectors.engine_metric_maps import (
    ENGINE_METRICS,
    ENGINES,
    POOL_RULES,
    EngineMetric,
    evaluate,
)
from kvtrace.warehouse.rows.serving import FieldError, pool_row
from kvtrace.warehouse.schema.serving import POOL_SNAPSHOTS

_INTEGER_COLUMNS = frozenset(f.name for f in POOL_SNAPSHOTS.schema if str(f.type) == "int64")


class MalformedResponse(ValueError):
    """The response is not what the source should send."""


def rows_from_server_info(body: bytes, worker_id: str, role: str | None) -> list[dict]:
    """Rows of an instrumented ``/server_info`` response."""
    try:
        info = json.loads(body)
        states = info["internal_states"]
        if not isinstance(states, list) or not states:
            raise TypeError("internal_states is empty")
        rows = []
        for i, state in enumerate(states):
            record = {k: v for k, v in state.items() if not isinstance(v, (dict, list))}
            record.update(state["session_cache"])
            record["worker_id"] = worker_id if len(states) == 1 else f"{worker_id}#{i}"
            record["worker_role"] = role
            rows.append(pool_row(record))
        return rows
    except (ValueError, KeyError, TypeError, AttributeError, FieldError) as exc:
        raise MalformedResponse(f"malformed /server_info response: {exc}"[:300]) from None


def rows_from_prometheus(body: bytes, worker_id: str, role: str | None) -> list[dict]:
    """One row from an engine's Prometheus text format (parsed by prometheus_client)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedResponse("malformed /metrics response: not UTF-8 text") from None
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    except ValueError as exc:
        raise MalformedResponse(f"malformed /metrics response: {exc}"[:300]) from None
    engines = [e for e in ENGINES if any(name.startswith(f"{e}:") for name in samples)]
    if not engines:
        raise MalformedResponse("the /metrics response has no sglang:, vllm: or lmcache: metrics")
    record: dict = {"worker_id": worker_id, "worker_role": role}
    for engine in engines:
        quantities = _pool_quantities(engine, samples)
        for rule in POOL_RULES:
            if rule.engine != engine or rule.column in record:
                continue
            value = evaluate(rule.expression, quantities)
            if value is None:
                continue
            if rule.column not in _INTEGER_COLUMNS:
                record[rule.column] = value
            else:
                record[rule.column] = round(value) if rule.rounding == "round" else int(value)
    try:
        return [pool_row(record)]
    except FieldError as exc:
        raise MalformedResponse(f"/metrics {exc}") from None


def _pool_quantities(
    engine: str, samples: dict[str, list[tuple[dict[str, str], float]]]
) -> dict[str, float]:
    """The engine's quantities the pool rules read, each metric's series combined."""
    read = {
        name for rule in POOL_RULES if rule.engine == engine for name in _names(rule.expression)
    }
    found: dict[str, float] = {}
    for metric in ENGINE_METRICS:
        if metric.engine == engine and metric.quantity in read and metric.sample in samples:
            values = [_value(metric, labels, value) for labels, value in samples[metric.sample]]
            known = [v for v in values if v is not None]
            if known:
                found[metric.quantity] = _combined(metric, known)
    return found


def _names(expression: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(expression, mode="eval")) if isinstance(n, ast.Name)}


def _value(metric: EngineMetric, labels: dict[str, str], value: float) -> float | None:
    """A series' value: the sample's, or the number in its value label (None: not one)."""
    if metric.value_label is not None:
        try:
            value = float(labels.get(metric.value_label, ""))
        except ValueError:
            return None
    if not math.isfinite(value):
        raise MalformedResponse(f"/metrics value is not a finite number: {metric.sample} {value}")
    return value


def _combined(metric: EngineMetric, values: list[float]) -> float:
    if metric.combine == "mean":
        return sum(values) / len(values)
    if metric.combine == "max":
        return max(values)
    return sum(values)
