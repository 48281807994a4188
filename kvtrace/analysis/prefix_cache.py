"""A prefix cache over a workload trace's block hashes: hits by capacity and policy.

Every request of a run reads its prompt's blocks (``hash_ids``, one per block of
``hash_block_tokens`` tokens, shared prefixes sharing ids) in arrival order, and one
cache serves the whole run, as a serving engine's prefix cache serves every request.

Semantics:

- ``block``: every block read is a hit or a miss on its own (a block cache).  LRU from
  one stack-distance pass for every capacity; OPT (Belady) and FIFO once per capacity.
- ``prefix``: what engines reuse.  A request's hit is the leading run of its blocks
  cached when it arrives (`kvtrace.kernels.prefix_sim`): ``lru`` and ``fifo`` are a
  hash-chained block pool (vLLM: every block of the request touched after), ``radix_lru``
  a radix tree (SGLang: leaves evicted only), ``opt`` Belady over the tree's leaves.

Weights: ``blocks`` counts hit blocks over blocks read; ``tokens`` hit tokens (a block
holds ``hash_block_tokens`` tokens, the last one what is left of the input) over input
tokens; ``requests`` the mean over requests of their token hit share.  ``warmup`` leaves
the earliest share of the requests out of the counts, not out of the cache.  Capacities
are 1, 2, 4, ... up to the first power of two at or above the run's distinct blocks,
plus those named in blocks or as byte budgets; with semantics ``prefix``, where each
capacity is a simulation of its own, only those named when any are.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pyarrow.compute as pc

from kvtrace.analysis.kv_layouts import bytes_per_token
from kvtrace.errors import QueryError
from kvtrace.kernels.cache_sim import LruStack, dense_ids, fifo_hits, opt_hits
from kvtrace.kernels.prefix_sim import hash_chain_hits, radix_hits, radix_nodes

PREFIX_POLICIES = ("lru", "opt", "fifo", "radix_lru")
SEMANTICS = ("block", "prefix")
WEIGHTS = ("blocks", "tokens", "requests")


@dataclass(frozen=True)
class PrefixCurveSpec:
    """What to simulate: policy, semantics, weight, warm-up share, and capacities in
    blocks or in bytes (with bytes per token, or a model of `kv_layouts`)."""

    policy: str = "lru"
    capacities: tuple[int, ...] = ()
    semantics: str = "block"
    weight: str = "blocks"
    warmup: float = 0.0
    capacity_bytes: tuple[int, ...] = ()
    bytes_per_token: float | None = None
    model: str | None = None

    def check(self) -> None:
        """Raise `QueryError` with one sentence for a setting the curve cannot take."""
        for name, value, allowed in (
            ("policy", self.policy, PREFIX_POLICIES),
            ("semantics", self.semantics, SEMANTICS),
            ("weight", self.weight, WEIGHTS),
        ):
            if value not in allowed:
                raise QueryError(
                    f"expected one of {', '.join(allowed)} for the {name}, got {value!r}"
                )
        if self.policy == "radix_lru" and self.semantics != "prefix":
            raise QueryError("a radix tree serves prefixes: radix_lru needs semantics 'prefix'")
        if any(c is None or c < 1 for c in self.capacities):
            raise QueryError("cache capacities must be at least 1 block")
        if any(b is None or b < 1 for b in self.capacity_bytes):
            raise QueryError("byte budgets must be at least 1 byte")
        if self.warmup is None or not 0 <= self.warmup < 1:
            raise QueryError(f"the warm-up share must lie in [0, 1), got {self.warmup}")
        if self.capacity_bytes and self.token_bytes() is None:
            raise QueryError("byte budgets need bytes_per_token or a model")

    def token_bytes(self) -> float | None:
        """KV bytes per token: given, or the model's."""
        if self.bytes_per_token is not None:
            if not (self.bytes_per_token > 0 and math.isfinite(self.bytes_per_token)):
                raise QueryError(f"bytes per token must be positive, got {self.bytes_per_token}")
            return float(self.bytes_per_token)
        return None if self.model is None else float(bytes_per_token(self.model))


@dataclass
class _Trace:
    """A run's requests as flat block ids with per-block token weights."""

    ids: np.ndarray  # dense block id of every read, request after request
    starts: np.ndarray  # request r reads ids[starts[r]:starts[r + 1]]
    tokens: np.ndarray  # tokens of each read block
    distinct: int
    block_tokens: int
    measured_from: int  # the first request counted (the rest is warm-up)

    @property
    def requests(self) -> int:
        return len(self.starts) - 1

    def weights(self, weight: str) -> np.ndarray:
        """Each read's weight in the hit rate's numerator (zero during warm-up)."""
        lengths = np.diff(self.starts)
        if weight == "blocks":
            values = np.ones(len(self.ids))
        elif weight == "tokens":
            values = self.tokens.astype(np.float64)
        else:
            summed = np.concatenate([[0], np.cumsum(self.tokens)])
            per_request = summed[self.starts[1:]] - summed[self.starts[:-1]]
            share = np.repeat(1.0 / np.maximum(per_request, 1), lengths)
            values = self.tokens * share
        values[: self.starts[self.measured_from]] = 0.0
        return values


def _load(con: duckdb.DuckDBPyConnection, run_id: str, warmup: float) -> _Trace:
    table = con.sql(
        "SELECT hash_ids, input_tokens, hash_block_tokens FROM workload_requests "
        "WHERE run_id = $run AND hash_ids IS NOT NULL ORDER BY request_idx",
        params={"run": run_id},
    ).to_arrow_table()
    lists = table["hash_ids"]
    keys = np.asarray(pc.list_flatten(lists).to_numpy(zero_copy_only=False), np.int64)
    lengths = np.asarray(pc.list_value_length(lists).to_numpy(zero_copy_only=False), np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    block_tokens = int(pc.max(table["hash_block_tokens"]).as_py() or 1)
    inputs = table["input_tokens"].to_numpy(zero_copy_only=False)
    inputs = np.where(np.isnan(inputs.astype(np.float64)), lengths * block_tokens, inputs)
    position = np.arange(len(keys)) - np.repeat(starts[:-1], lengths)
    left = np.repeat(inputs.astype(np.int64), lengths) - position * block_tokens
    tokens = np.clip(left, 0, block_tokens).astype(np.int64)
    ids, distinct = dense_ids(keys)
    requests = len(lengths)
    return _Trace(ids, starts, tokens, distinct, block_tokens, math.floor(requests * warmup))


def prefix_hit_curve_rows(
    con: duckdb.DuckDBPyConnection, spec: PrefixCurveSpec
) -> list[dict[str, Any]]:
    """One row per (run, capacity): the ``workload_prefix_hit_curve`` columns."""
    spec.check()
    token_bytes = spec.token_bytes()
    runs = [
        row[0]
        for row in con.sql(
            "SELECT DISTINCT run_id FROM workload_requests WHERE hash_ids IS NOT NULL "
            "ORDER BY run_id"
        ).fetchall()
    ]
    rows = []
    for run_id in runs:
        trace = _load(con, run_id, spec.warmup)
        budgets = _budgets(spec, token_bytes, trace.block_tokens)
        grid = 2 ** np.arange(max(trace.distinct - 1, 0).bit_length() + 1, dtype=np.int64)
        if spec.semantics == "prefix" and (spec.capacities or budgets):
            grid = grid[:0]  # a simulation per capacity: only those asked for
        wanted = np.unique(
            np.concatenate([grid, np.asarray(spec.capacities, np.int64), list(budgets)]).astype(
                np.int64
            )
        )
        counted = _counted(trace, spec, wanted)
        tokens_weights = trace.weights("tokens")
        measured = slice(trace.starts[trace.measured_from], None)
        accesses = len(trace.ids) - int(trace.starts[trace.measured_from])
        denominator = {
            "blocks": accesses,
            "tokens": float(tokens_weights.sum()),
            "requests": trace.requests - trace.measured_from,
        }[spec.weight]
        for capacity, (hits, hit_tokens, weighted) in zip(wanted.tolist(), counted, strict=True):
            for budget in budgets.get(capacity, [None]):
                rows.append(
                    {
                        "run_id": run_id,
                        "policy": spec.policy,
                        "capacity_blocks": capacity,
                        "accesses": accesses,
                        "hits": hits,
                        "hit_rate": weighted / denominator if denominator else None,
                        "semantics": spec.semantics,
                        "weight": spec.weight,
                        "warmup": spec.warmup,
                        "capacity_bytes": budget,
                        "requests": trace.requests - trace.measured_from,
                        "hit_tokens": hit_tokens,
                        "tokens": int(trace.tokens[measured].sum()),
                    }
                )
    return rows


def _budgets(
    spec: PrefixCurveSpec, token_bytes: float | None, block_tokens: int
) -> dict[int, list[int]]:
    """The capacity in blocks of each byte budget."""
    found: dict[int, list[int]] = {}
    if token_bytes is None:
        return found
    block_bytes = token_bytes * block_tokens
    for budget in spec.capacity_bytes:
        blocks = math.floor(budget / block_bytes)
        if blocks < 1:
            raise QueryError(
                f"a budget of {budget:,} bytes holds no block: one block of {block_tokens} "
                f"tokens takes {block_bytes:,.0f} bytes"
            )
        found.setdefault(blocks, []).append(budget)
    return found


def _counted(
    trace: _Trace, spec: PrefixCurveSpec, capacities: np.ndarray
) -> list[tuple[int, int, float]]:
    """Per capacity: measured hit blocks, hit tokens and the weighted hits."""
    blocks = trace.weights("blocks")
    tokens = trace.weights("tokens")
    weighted = trace.weights(spec.weight)
    if spec.semantics == "block":
        if spec.policy == "lru":
            distances = LruStack().distances(trace.ids)
            reused = distances >= 0
            order = np.argsort(distances[reused], kind="stable")
            ranked = distances[reused][order]
            sums = [
                np.concatenate([[0.0], np.cumsum(w[reused][order])])
                for w in (blocks, tokens, weighted)
            ]
            at = np.searchsorted(ranked, capacities, side="left")
            return [(round(sums[0][k]), round(sums[1][k]), float(sums[2][k])) for k in at]
        simulate = opt_hits if spec.policy == "opt" else fifo_hits
        masks = [simulate(trace.ids, trace.distinct, int(c)) for c in capacities]
        return [
            (round(blocks[m].sum()), round(tokens[m].sum()), float(weighted[m].sum()))
            for m in masks
        ]
    return _prefix_counts(trace, spec.policy, capacities, blocks, tokens, weighted)


def _prefix_counts(
    trace: _Trace,
    policy: str,
    capacities: np.ndarray,
    blocks: np.ndarray,
    tokens: np.ndarray,
    weighted: np.ndarray,
) -> list[tuple[int, int, float]]:
    """Prefix semantics: per capacity, the weights of each request's leading hit run."""
    if policy in ("radix_lru", "opt"):
        nodes, parent = radix_nodes(trace.ids, trace.starts)
    sums = [np.concatenate([[0.0], np.cumsum(w)]) for w in (blocks, tokens, weighted)]
    first = trace.starts[:-1]

    def simulate(capacity: int) -> tuple[int, int, float]:
        if policy in ("radix_lru", "opt"):
            hits = radix_hits(nodes, trace.starts, parent, capacity, policy)
        else:
            hits = hash_chain_hits(trace.ids, trace.starts, trace.distinct, capacity, policy)
        ends = first + hits
        b, t, w = (float((s[ends] - s[first]).sum()) for s in sums)
        return round(b), round(t), w

    # the kernels release the GIL: one capacity per core
    with ThreadPoolExecutor(max_workers=min(len(capacities), os.cpu_count() or 1) or 1) as pool:
        return list(pool.map(simulate, capacities.tolist()))
