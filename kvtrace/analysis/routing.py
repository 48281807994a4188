"""Routing what-if: a run's requests replayed over a fleet of workers, each with a prefix
cache of its own, under a routing policy.

Requests come in arrival order (``arrival_s``, then ``request_idx``) and read their
prompt's blocks as paths of the prefix tree (`kvtrace.analysis.prefix_cache`), so one
worker is ``workload_prefix_hit_curve`` with semantics ``prefix`` at the same capacity
(``lru``: vLLM's hash-chained pool; ``radix``: SGLang's tree, policy ``radix_lru``).

Load: a worker's active requests when a request arrives.  A request is active on its
worker from its arrival for ``output_tokens x tpot_ms`` (its decode; prefill is taken as
instant), so the load does not depend on the caches.  Policies:

- ``round_robin``: request k (in arrival order) to worker k mod N;
- ``least_loaded``: the fewest active requests;
- ``session_hash``: a hash ring of ``VIRTUAL_NODES`` points per worker over the session
  (``session_id``; the request itself when it has none): a session's requests share a
  worker, and adding a worker moves about 1 / N of the sessions;
- ``prefix_aware``: llm-d's ``prefix-cache-scorer`` (matched blocks / blocks) plus its
  ``load-aware-scorer`` (0.5 x (1 - min(load, threshold) / threshold), threshold 128 by
  default), weights 1 and 1 as its estimate-prefix-cache config has them, the largest
  sum winning (llm-d-inference-scheduler 520af47, pkg/epp/framework/plugins/scheduling/
  scorer/{prefix,loadaware}, deploy/config/epp-estimate-prefix-cache-config.yaml);
- ``prefix_cost``: Dynamo's KV router cost, ``overlap_weight x prefill blocks + decode
  blocks``, the smallest winning, with prefill blocks the request's uncached blocks and
  decode blocks the worker's active requests' blocks plus the request's own (ai-dynamo/
  dynamo db19bd2, lib/llm/src/kv_router/scheduler.rs, ``DefaultWorkerSelector``; at
  temperature 0).

Every policy breaks a tie by the smaller load, then the worker chosen least recently,
then the lower index (`kvtrace.kernels.routing`).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from kvtrace.analysis.kv_layouts import bytes_per_token
from kvtrace.analysis.prefix_cache import PrefixSimulation, PrefixTrace, trace_of
from kvtrace.errors import InputError, QueryError

__all__ = [
    "CACHES",
    "POLICIES",
    "VIRTUAL_NODES",
    "Routed",
    "RoutingSpec",
    "ring_workers",
    "routed",
    "routing_request_rows",
    "routing_rows",
]

POLICIES = ("round_robin", "least_loaded", "session_hash", "prefix_aware", "prefix_cost")
CACHES = ("lru", "radix")
VIRTUAL_NODES = 100  # hash-ring points per worker
_MAX_WORKERS = 4096


@dataclass(frozen=True)
class RoutingSpec:
    """The fleet and its router: workers, each worker's capacity (blocks, or bytes with
    bytes per token or a model), the cache, the policy (or ``all``) and the load model."""

    workers: int = 4
    capacity_blocks: int | None = None
    policy: str = "prefix_aware"
    cache: str = "lru"
    capacity_bytes: int | None = None
    bytes_per_token: float | None = None
    model: str | None = None
    tpot_ms: float = 30.0
    threshold: float = 128.0
    overlap_weight: float = 1.0

    def policies(self) -> tuple[str, ...]:
        """The policies to replay, or one sentence for a name none has."""
        if self.policy == "all":
            return POLICIES
        if self.policy not in POLICIES:
            raise QueryError(
                f"expected one of {', '.join(POLICIES)} or all for the policy, got {self.policy!r}"
            )
        return (self.policy,)

    def check(self) -> None:
        """Raise `QueryError` with one sentence for a setting the replay cannot take."""
        self.policies()
        if self.cache not in CACHES:
            raise QueryError(
                f"expected one of {', '.join(CACHES)} for the cache, got {self.cache!r}"
            )
        if self.workers is None or not 1 <= self.workers <= _MAX_WORKERS:
            raise QueryError(f"workers must lie in [1, {_MAX_WORKERS}], got {self.workers}")
        if (self.capacity_blocks is None) == (self.capacity_bytes is None):
            raise QueryError("name each worker's capacity: capacity_blocks or capacity_bytes")
        if self.capacity_blocks is not None and self.capacity_blocks < 0:
            raise QueryError(f"a capacity cannot be negative, got {self.capacity_blocks}")
        if self.capacity_bytes is not None and self.capacity_bytes < 0:
            raise QueryError(f"a byte budget cannot be negative, got {self.capacity_bytes}")
        if self.tpot_ms is None or not (math.isfinite(self.tpot_ms) and self.tpot_ms >= 0):
            raise QueryError(f"tpot_ms must be a finite number of at least 0, got {self.tpot_ms}")
        if self.threshold is None or not (math.isfinite(self.threshold) and self.threshold > 0):
            raise QueryError(f"threshold must be a finite positive number, got {self.threshold}")
        if self.overlap_weight is None or not math.isfinite(self.overlap_weight):
            raise QueryError(f"overlap_weight must be finite, got {self.overlap_weight}")

    def blocks(self, block_tokens: int) -> int:
        """Each worker's capacity in blocks of ``block_tokens`` tokens."""
        if self.capacity_blocks is not None:
            return int(self.capacity_blocks)
        if self.bytes_per_token is not None:
            if not (self.bytes_per_token > 0 and math.isfinite(self.bytes_per_token)):
                raise QueryError(f"bytes per token must be positive, got {self.bytes_per_token}")
            token_bytes = float(self.bytes_per_token)
        elif self.model is not None:
            token_bytes = float(bytes_per_token(self.model))
        else:
            raise QueryError("a byte budget needs bytes_per_token or a model")
        assert self.capacity_bytes is not None
        return math.floor(self.capacity_bytes / (token_bytes * block_tokens))


@dataclass
class Requests:
    """A run's requests in arrival order: the prefix trace and what the router reads."""

    trace: PrefixTrace
    arrivals: np.ndarray  # seconds
    outputs: np.ndarray  # output tokens (0 where unknown)
    ring_keys: np.ndarray  # uint64: the session's hash, or the request's


@dataclass
class Routed:
    """One policy's replay: per request its worker, hit blocks and hit tokens, and the
    worker's load when it arrived."""

    policy: str
    capacity: int
    workers: np.ndarray
    hit_blocks: np.ndarray
    hit_tokens: np.ndarray
    loads: np.ndarray


def _splitmix(values: np.ndarray) -> np.ndarray:
    """SplitMix64 of each value: well-spread 64-bit keys from integers."""
    with np.errstate(over="ignore"):
        z = values.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _string_key(text: str) -> int:
    """A stable 64-bit key of a string (BLAKE2b)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def ring_keys(sessions: pa.Array, request_idx: np.ndarray) -> np.ndarray:
    """Each request's place on the hash ring: its session's key, or, without a session,
    SplitMix64 of its ``request_idx``."""
    keys = _splitmix(np.asarray(request_idx, np.int64))
    encoded = pa.chunked_array([sessions]).combine_chunks().dictionary_encode()
    named = np.asarray([_string_key(str(s)) for s in encoded.dictionary.to_pylist()], np.uint64)
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    has = ~np.asarray(encoded.indices.is_null().to_numpy(zero_copy_only=False), bool)
    keys[has] = named[codes[has].astype(np.int64)]
    return keys


def ring_workers(keys: np.ndarray, workers: int) -> np.ndarray:
    """The worker of each key on a ring of ``VIRTUAL_NODES`` points per worker (point v
    of worker w at the key of ``"worker-w-v"``): the first point at or after the key,
    the ring wrapping around."""
    points = np.asarray(
        [_string_key(f"worker-{w}-{v}") for w in range(workers) for v in range(VIRTUAL_NODES)],
        np.uint64,
    )
    owners = np.repeat(np.arange(workers, dtype=np.int64), VIRTUAL_NODES)
    order = np.argsort(points, kind="stable")
    at = np.searchsorted(points[order], keys, side="left") % len(points)
    found: np.ndarray = owners[order][at]
    return found


def load_requests(table: pa.Table) -> Requests:
    """The requests of one run in arrival order (``request_idx``, ``hash_ids``,
    ``input_tokens``, ``hash_block_tokens``, ``arrival_s``, ``output_tokens`` and
    ``session_id`` columns, sorted already)."""
    trace = trace_of(table, 0.0)
    arrivals = np.asarray(table["arrival_s"].to_numpy(zero_copy_only=False), np.float64)
    outputs = np.asarray(table["output_tokens"].to_numpy(zero_copy_only=False), np.float64)
    return Requests(
        trace,
        np.nan_to_num(arrivals, nan=np.inf),
        np.nan_to_num(outputs, nan=0.0),
        ring_keys(table["session_id"], trace.request_idx),
    )


def routed(requests: Requests, spec: RoutingSpec) -> list[Routed]:
    """Each policy of ``spec`` replayed over the requests."""
    from kvtrace.kernels import routing as kernel

    trace = requests.trace
    capacity = spec.blocks(trace.block_tokens)
    simulation = PrefixSimulation(trace, "radix_lru", "prefix")  # paths and their tree
    assert simulation.tree is not None
    nodes = simulation.paths[0]
    ends = requests.arrivals + requests.outputs * spec.tpot_ms / 1e3
    codes = {
        "round_robin": kernel.FIXED,
        "session_hash": kernel.FIXED,
        "least_loaded": kernel.LEAST_LOADED,
        "prefix_aware": kernel.PREFIX_SCORE,
        "prefix_cost": kernel.PREFIX_COST,
    }
    found = []
    summed = np.concatenate([[0], np.cumsum(trace.tokens, dtype=np.int64)])
    for policy in spec.policies():
        fixed = np.zeros(trace.requests, np.int64)
        if policy == "round_robin":
            fixed = np.arange(trace.requests, dtype=np.int64) % spec.workers
        elif policy == "session_hash":
            fixed = ring_workers(requests.ring_keys, spec.workers)
        workers, hits, loads = kernel.route(
            nodes,
            trace.starts,
            requests.arrivals,
            ends,
            fixed,
            codes[policy],
            kernel.POOL if spec.cache == "lru" else kernel.RADIX,
            spec.workers,
            capacity,
            simulation.tree,
            spec.threshold,
            spec.overlap_weight,
        )
        hit_tokens = summed[trace.starts[:-1] + hits] - summed[trace.starts[:-1]]
        found.append(Routed(policy, capacity, workers, hits, hit_tokens, loads))
    return found


def _run_tables(con: duckdb.DuckDBPyConnection) -> list[tuple[str, pa.Table]]:
    """Each run with block hashes and its requests in arrival order."""
    runs = [
        row[0]
        for row in con.sql(
            "SELECT DISTINCT run_id FROM workload_requests WHERE hash_ids IS NOT NULL "
            "AND run_id IS NOT NULL ORDER BY run_id"
        ).fetchall()
    ]
    tables = []
    for run in runs:
        table = con.sql(
            "SELECT request_idx, hash_ids, input_tokens, hash_block_tokens, arrival_s, "
            "output_tokens, session_id::VARCHAR AS session_id FROM workload_requests "
            "WHERE run_id = $run AND hash_ids IS NOT NULL ORDER BY arrival_s, request_idx",
            params={"run": run},
        ).to_arrow_table()
        tables.append((run, table))
    if not tables:
        raise InputError(
            "no workload run has block hashes (hash_ids), so no routing can be replayed; "
            "Mooncake-format traces carry them"
        )
    return tables


def _stats(
    selected: np.ndarray, tokens: np.ndarray, blocks: np.ndarray, one: Routed
) -> dict[str, Any]:
    """The counts of the requests ``selected``."""
    count = int(selected.sum())
    total = int(tokens[selected].sum())
    saved = int(one.hit_tokens[selected].sum())
    loads = one.loads[selected]
    return {
        "requests": count,
        "blocks": int(blocks[selected].sum()),
        "hit_blocks": int(one.hit_blocks[selected].sum()),
        "tokens": total,
        "prefill_tokens_saved": saved,
        "hit_rate": saved / total if total else None,
        "mean_load": float(loads.mean()) if count else None,
        "peak_load": int(loads.max()) if count else None,
    }


def routing_rows(
    con: duckdb.DuckDBPyConnection,
    workers: int,
    capacity_blocks: int | None,
    policy: str,
    cache: str,
    capacity_bytes: int | None,
    bytes_per_token: float | None,
    model: str | None,
    tpot_ms: float,
    threshold: float,
    overlap_weight: float,
) -> list[dict[str, Any]]:
    """The rows of ``workload_routing``: per run and policy, one per worker and one for
    the fleet (worker NULL)."""
    spec = RoutingSpec(
        workers, capacity_blocks, policy, cache, capacity_bytes, bytes_per_token, model,
        tpot_ms, threshold, overlap_weight,
    )  # fmt: skip
    spec.check()
    rows = []
    for run, table in _run_tables(con):
        requests = load_requests(table)
        tokens = requests.trace.tokens_per_request()
        blocks = np.diff(requests.trace.starts)
        for one in routed(requests, spec):
            head = {"run_id": run, "policy": one.policy, "cache": spec.cache}
            shape = {"workers": spec.workers, "capacity_blocks": one.capacity}
            every = np.ones(len(one.workers), bool)
            fleet = _stats(every, tokens, blocks, one)
            per_worker = np.bincount(one.workers, minlength=spec.workers)
            mean = len(one.workers) / spec.workers
            imbalance = float(per_worker.max() / mean) if len(one.workers) else None
            rows.append(
                {**head, "worker": None, **shape, **fleet, "request_share": 1.0,
                 "imbalance": imbalance}
            )  # fmt: skip
            for worker in range(spec.workers):
                stats = _stats(one.workers == worker, tokens, blocks, one)
                share = stats["requests"] / len(one.workers) if len(one.workers) else None
                rows.append(
                    {**head, "worker": worker, **shape, **stats, "request_share": share,
                     "imbalance": None}
                )  # fmt: skip
    return rows


def routing_request_rows(
    con: duckdb.DuckDBPyConnection,
    workers: int,
    capacity_blocks: int | None,
    policy: str,
    cache: str,
    capacity_bytes: int | None,
    bytes_per_token: float | None,
    model: str | None,
    tpot_ms: float,
    threshold: float,
    overlap_weight: float,
) -> list[dict[str, Any]]:
    """The rows of ``workload_routing_requests``: per run, policy and request (in arrival
    order), its worker, hit and the worker's load when it arrived."""
    spec = RoutingSpec(
        workers, capacity_blocks, policy, cache, capacity_bytes, bytes_per_token, model,
        tpot_ms, threshold, overlap_weight,
    )  # fmt: skip
    spec.check()
    rows = []
    for run, table in _run_tables(con):
        requests = load_requests(table)
        trace = requests.trace
        tokens = trace.tokens_per_request().tolist()
        blocks = np.diff(trace.starts).tolist()
        indices = trace.request_idx.tolist()
        for one in routed(requests, spec):
            for at, (worker, hit, saved, load) in enumerate(
                zip(
                    one.workers.tolist(),
                    one.hit_blocks.tolist(),
                    one.hit_tokens.tolist(),
                    one.loads.tolist(),
                    strict=True,
                )
            ):
                rows.append(
                    {
                        "run_id": run,
                        "policy": one.policy,
                        "cache": spec.cache,
                        "request_idx": indices[at],
                        "worker": worker,
                        "load": load,
                        "blocks": blocks[at],
                        "hit_blocks": hit,
                        "tokens": tokens[at],
                        "hit_tokens": saved,
                    }
                )
    return rows
