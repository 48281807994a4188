"""Turn one poll response into a pool snapshot row.

Two sources are understood:

* the instrumented ``/server_info`` of the serving study: JSON whose
  ``internal_states[i].session_cache`` holds the pool fields (and, at the state level,
  ``kvcache_mem_gb`` and ``last_gen_throughput``); a server with several internal states
  (data-parallel ranks) gives one row per state, worker id ``<name>#<i>``;
* SGLang's Prometheus ``/metrics`` text, mapped as follows (samples of one metric with
  different labels are summed):

  ====================================== ===========================================
  metric                                 column
  ====================================== ===========================================
  sglang:kv_available_tokens             available_tokens
  sglang:kv_evictable_tokens             idle_evictable_tokens
  sglang:streaming_session_held_tokens   held_tokens
  sglang:num_running_reqs                running_batch_size
  sglang:kv_used_tokens + available      capacity_tokens
  sglang:num_used_tokens / token_usage   capacity_tokens, when kv_used_tokens is absent
  ====================================== ===========================================
"""

from __future__ import annotations

import json
import math

from kvtrace.warehouse.rows.serving import FieldError, pool_row

PROMETHEUS_MAP = {
    "sglang:kv_available_tokens": "available_tokens",
    "sglang:kv_evictable_tokens": "idle_evictable_tokens",
    "sglang:streaming_session_held_tokens": "held_tokens",
    "sglang:num_running_reqs": "running_batch_size",
}


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
    """One row from SGLang's Prometheus text format (parsed by prometheus_client)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedResponse("malformed /metrics response: not UTF-8 text") from None
    sums: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    except ValueError as exc:
        raise MalformedResponse(f"malformed /metrics response: {exc}"[:300]) from None
    for name, value in sums.items():
        if not math.isfinite(value):
            raise MalformedResponse(f"/metrics value is not a finite number: {name} {value}")
    if not any(name.startswith("sglang:") for name in sums):
        raise MalformedResponse("the /metrics response has no sglang: metrics")
    record: dict = {"worker_id": worker_id, "worker_role": role}
    for metric, column in PROMETHEUS_MAP.items():
        if metric in sums:
            record[column] = int(sums[metric])
    available = sums.get("sglang:kv_available_tokens")
    if "sglang:kv_used_tokens" in sums and available is not None:
        record["capacity_tokens"] = int(sums["sglang:kv_used_tokens"] + available)
    elif sums.get("sglang:token_usage") and "sglang:num_used_tokens" in sums:
        record["capacity_tokens"] = round(
            sums["sglang:num_used_tokens"] / sums["sglang:token_usage"]
        )
    try:
        return [pool_row(record)]
    except FieldError as exc:
        raise MalformedResponse(f"/metrics {exc}") from None
