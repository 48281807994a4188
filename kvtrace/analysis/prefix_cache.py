"""A prefix cache over a workload trace's block hashes: hits by capacity and policy.

Every request of a run reads its prompt's blocks (``hash_ids``, one per block of
``hash_block_tokens`` tokens, shared prefixes sharing ids) in arrival order (``arrival_s``,
then ``request_idx``: a stable sort of the trace by arrival, whatever order its file lists
them in), and one cache serves the whole run, as a serving engine's prefix cache serves
every request.

Semantics:

- ``block``: every block read is a hit or a miss on its own (a block cache).  LRU from
  one stack-distance pass for every capacity; OPT (Belady) and FIFO once per capacity.
- ``prefix``: what engines reuse.  A request's hit is the leading run of its blocks
  cached when it arrives (`kvtrace.kernels.prefix_sim`): ``lru`` and ``fifo`` are a
  hash-chained block pool (vLLM: every block of the request touched after), ``radix_lru``
  a radix tree (SGLang: leaves evicted only), ``opt`` Belady over the tree's leaves.
  Every policy names a block by its path (its parent chain), never by its id alone.

Weights: ``blocks`` counts hit blocks over blocks read; ``tokens`` hit tokens (a block
holds ``hash_block_tokens`` tokens, the last one what is left of the input) over input
tokens; ``requests`` the mean over requests of their token hit share.  ``warmup`` leaves
the earliest share of the requests out of the counts, not out of the cache.  Capacities
are 1, 2, 4, ... up to the first power of two at or above the run's distinct blocks,
plus those named in blocks or as byte budgets; with semantics ``prefix``, where each
capacity is a simulation of its own, only those named when any are.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from kvtrace.analysis._columns import PREFIX_HIT_CURVE
from kvtrace.analysis.kv_layouts import bytes_per_token
from kvtrace.analysis.policies import policy_named, prefix_policies
from kvtrace.errors import InputError, QueryError
from kvtrace.kernels.cache_sim import ItemIds
from kvtrace.kernels.prefix_sim import (
    block_tokens,
    chained_tree,
    distance_sums,
    fifo_prefix_hits,
    first_seen_order,
    hit_sums,
    hit_weights,
    leading_lru_distances,
    leading_reads,
    lru_distances,
    narrowest,
    radix_nodes,
    run_sums,
)
from kvtrace.kernels.radix_cache import next_uses, radix_hits

SEMANTICS = ("block", "prefix")
_BATCH_ROWS = 1 << 16  # requests read from the warehouse at a time
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
            ("policy", self.policy, prefix_policies()),
            ("semantics", self.semantics, SEMANTICS),
            ("weight", self.weight, WEIGHTS),
        ):
            if value not in allowed:
                raise QueryError(
                    f"expected one of {', '.join(allowed)} for the {name}, got {value!r}"
                )
        if self.semantics not in policy_named(self.policy).prefix_semantics:
            raise QueryError(
                f"a radix tree serves prefixes: {self.policy} needs semantics 'prefix'"
            )
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
class PrefixTrace:
    """A run's requests as flat block ids with per-block token weights."""

    ids: np.ndarray  # dense block id of every read, request after request (int32 mostly)
    starts: np.ndarray  # request r reads ids[starts[r]:starts[r + 1]]
    tokens: np.ndarray  # tokens of each read block (int16 below blocks of 32 K tokens)
    distinct: int
    block_tokens: int
    measured_from: int  # the first request counted (the rest is warm-up)
    request_idx: np.ndarray  # each request's data row in the trace

    @property
    def requests(self) -> int:
        return len(self.starts) - 1

    @property
    def first_read(self) -> int:
        """The first read counted."""
        return int(self.starts[self.measured_from])

    def tokens_per_request(self) -> np.ndarray:
        """Each request's input tokens, as its blocks hold them."""
        summed = np.concatenate([[0], np.cumsum(self.tokens)])
        per_request: np.ndarray = summed[self.starts[1:]] - summed[self.starts[:-1]]
        return per_request

    def shares(self) -> np.ndarray:
        """Each request's weight per token under weight ``requests``."""
        share: np.ndarray = 1.0 / np.maximum(self.tokens_per_request(), 1)
        return share


def _load(con: duckdb.DuckDBPyConnection, run_id: str, warmup: float) -> PrefixTrace:
    """The run's requests with block hashes, in arrival order: read a range of
    ``request_idx`` at a time (a filter the warehouse applies before it deduplicates
    rows, so no query holds every request's hashes) and sorted here."""
    listed = con.sql(
        "SELECT request_idx FROM workload_requests WHERE run_id = $run AND request_idx "
        "IS NOT NULL ORDER BY request_idx",
        params={"run": run_id},
    ).to_arrow_table()
    edges = listed["request_idx"].to_numpy()[::_BATCH_ROWS].tolist()
    ranges = [
        ("request_idx >= $low AND request_idx < $high", {"low": low, "high": high})
        for low, high in itertools.pairwise(edges)
    ]
    if edges:
        ranges.append(("request_idx >= $low", {"low": edges[-1]}))
    ranges.append(("request_idx IS NULL", {}))
    batches = (
        batch
        for condition, bounds in ranges
        for batch in con.sql(
            "SELECT request_idx, hash_ids, input_tokens, hash_block_tokens, arrival_s "
            f"FROM workload_requests WHERE run_id = $run AND hash_ids IS NOT NULL AND {condition}",
            params={"run": run_id, **bounds},
        )
        .to_arrow_table()
        .to_batches()
    )
    return _trace_from(batches, warmup, ordered=False)


def trace_of(table: pa.Table, warmup: float) -> PrefixTrace:
    """The trace of requests in order: ``request_idx``, ``hash_ids``, ``input_tokens``
    and ``hash_block_tokens`` columns, as `workload_requests` has them."""
    return _trace_from(table.to_batches(_BATCH_ROWS), warmup, ordered=True)


def _arrival_order(arrival: np.ndarray, request_idx: np.ndarray) -> np.ndarray:
    """The order of ``ORDER BY arrival_s, request_idx`` (nulls, NaN here, last)."""
    keys = []
    for column in (request_idx, arrival):
        values = np.asarray(column, np.float64)
        null = np.isnan(values)
        keys += [np.where(null, 0.0, values), null.astype(np.int8)]
    found: np.ndarray = np.lexsort(keys)
    return found


def _flat(lists: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A column of lists (none of them null): its values one after another, as int64,
    and each list's length."""
    offsets = lists.offsets.to_numpy()
    values = lists.values.slice(offsets[0], offsets[-1] - offsets[0])
    return np.asarray(values.to_numpy(zero_copy_only=False), np.int64), np.diff(offsets)


def _block_size(stated: np.ndarray) -> int:
    """The tokens of a hashed block: the largest stated (NaN where none is), else 1."""
    sizes = stated.astype(np.float64)
    sizes = sizes[~np.isnan(sizes)]
    return int(sizes.max()) if len(sizes) and sizes.max() else 1


def _numbered(
    batches: Iterable[pa.RecordBatch], names: list[str]
) -> tuple[np.ndarray, int, dict[str, np.ndarray]]:
    """Every read's dense id, numbering block hashes a batch at a time (only the ids, not
    the hashes, are kept), the distinct hashes, and each request's ``lengths`` and columns
    ``names`` as NumPy arrays of their own (NaN where null), without Arrow's compute
    module: no view is kept into a batch, so each batch's buffers go as it is read."""
    numbering = ItemIds()
    pieces: list[np.ndarray] = []
    columns: dict[str, list[np.ndarray]] = {name: [] for name in ["lengths", *names]}
    for batch in batches:
        keys, lengths = _flat(batch.column("hash_ids"))
        ids = numbering.ids(keys)
        pieces.append(ids.astype(np.int32 if numbering.count < 2**31 else np.int64))
        columns["lengths"].append(lengths)
        for name in names:
            columns[name].append(np.array(batch.column(name).to_numpy(zero_copy_only=False)))
    distinct = numbering.count
    del numbering  # its table goes before the reads are put together
    whole = {
        name: np.concatenate(chunks) if chunks else np.zeros(0, np.int64)
        for name, chunks in columns.items()
    }
    return (np.concatenate(pieces) if pieces else np.zeros(0, np.int32)), distinct, whole


def _trace_from(batches: Iterable[pa.RecordBatch], warmup: float, *, ordered: bool) -> PrefixTrace:
    """The trace of requests (`_numbered`); unless ``ordered``, the requests are put in
    arrival order (``arrival_s`` column) and their ids numbered anew (unless they come in
    that order already)."""
    names = ["input_tokens", "hash_block_tokens", "request_idx"] + (
        [] if ordered else ["arrival_s"]
    )
    ids, distinct, whole = _numbered(batches, names)
    lengths = whole.pop("lengths").astype(np.int64)
    if not ordered:
        order = _arrival_order(whole["arrival_s"], whole["request_idx"])
        if np.any(order != np.arange(len(order))):
            stored = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            ids = first_seen_order(ids, stored, order, distinct)
            lengths = lengths[order]
            whole = {name: column[order] for name, column in whole.items()}
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    block_size = _block_size(whole["hash_block_tokens"])
    inputs = whole["input_tokens"]
    inputs = np.where(np.isnan(inputs.astype(np.float64)), lengths * block_size, inputs)
    tokens = block_tokens(starts, inputs.astype(np.int64), block_size)
    requests = len(lengths)
    measured_from = math.floor(requests * warmup)
    indices = np.asarray(whole["request_idx"], np.int64)
    return PrefixTrace(ids, starts, tokens, distinct, block_size, measured_from, indices)


def prefix_hit_curve_rows(
    con: duckdb.DuckDBPyConnection, spec: PrefixCurveSpec, runs: list[str] | None = None
) -> list[dict[str, Any]]:
    """One row per (run, capacity): the ``workload_prefix_hit_curve`` columns, of every
    run with block hashes or of ``runs`` (each must have them)."""
    spec.check()
    token_bytes = spec.token_bytes()
    rows = []
    for run_id, trace in _traces(con, spec.warmup, runs):
        budgets = _budgets(spec, token_bytes, trace.block_tokens)
        grid = 2 ** np.arange(max(trace.distinct - 1, 0).bit_length() + 1, dtype=np.int64)
        if spec.capacities or budgets:
            grid = grid[:0]  # the capacities asked for replace the powers of two
        wanted = np.unique(
            np.concatenate([grid, np.asarray(spec.capacities, np.int64), list(budgets)]).astype(
                np.int64
            )
        )
        counted = _counted(trace, spec, wanted)
        first_read = trace.first_read
        accesses = len(trace.ids) - first_read
        tokens = int(trace.tokens[first_read:].sum())
        requests = trace.requests - trace.measured_from
        denominator = {"blocks": accesses, "tokens": tokens, "requests": requests}[spec.weight]
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
                        "requests": requests,
                        "hit_tokens": hit_tokens,
                        "tokens": tokens,
                    }
                )
    return rows


def prefix_hit_curve_table(
    con: duckdb.DuckDBPyConnection, spec: PrefixCurveSpec, runs: list[str] | None = None
) -> pa.Table:
    """The rows of `prefix_hit_curve_rows` as one table, or one sentence when no run has
    block hashes."""
    rows = prefix_hit_curve_rows(con, spec, runs)
    if not rows:
        raise InputError(
            "no workload run has block hashes (hash_ids), so no prefix cache can be "
            "simulated; Mooncake-format traces carry them"
        )
    return pa.Table.from_pylist(rows, pa.schema(list(PREFIX_HIT_CURVE)))


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


class PrefixSimulation:
    """Which of a run's block reads hit, per capacity (the shared preparation kept).

    With semantics ``prefix`` every policy names a block by its path (the node of the
    prefix tree: the block and every block before it in its request), so a hash id that
    repeats under another parent is another block, as it is in an engine whose block
    hash covers everything up to the block's end; on a trace whose ids are chained (each
    id implies its parents, as Mooncake's do) the path and the id name the same block."""

    def __init__(self, trace: PrefixTrace, policy: str, semantics: str) -> None:
        self.trace, self.policy, self.semantics = trace, policy_named(policy), semantics
        self.distances: np.ndarray | None = None
        self.tree: tuple[np.ndarray, int] | None = None  # each node's parent, the root
        self.next_use: np.ndarray | None = None  # OPT's: each read's next request
        self.paths = (trace.ids, trace.distinct)  # each read's block and how many there are
        if semantics == "prefix":
            self.tree = chained_tree(trace.ids, trace.starts, trace.distinct)
            if self.tree is None:  # an id repeats under another parent: number the paths
                nodes, parent = radix_nodes(trace.ids, trace.starts)
                self.paths, self.tree = (nodes, len(parent)), (parent, 0)
            if self.policy.prefix_pass != "radix_tree":
                self.tree = None  # only the radix tree needs the parents
            elif self.policy.knows_future:  # one pass for every capacity
                self.next_use = next_uses(self.paths[0], trace.starts, len(self.tree[0]))
        if self.policy.prefix_pass == "stack_distance":  # every capacity from one pass
            wide = narrowest(self.paths[1] + 1)  # its largest value: served by no capacity
            self.distances = (
                lru_distances(trace.ids, wide)
                if semantics == "block"
                else leading_lru_distances(self.paths[0], trace.starts, wide)
            )

    def bounded(self, capacity: int) -> int:
        """The capacity that serves the same reads: a cache that holds every block (or
        path) never evicts, however much larger it is."""
        return min(capacity, self.paths[1])

    def hits(self, capacity: int) -> np.ndarray:
        """Per block read: whether the cache of ``capacity`` blocks served it."""
        trace = self.trace
        capacity = self.bounded(capacity)
        if self.distances is not None:
            hit: np.ndarray = (self.distances >= 0) & (self.distances < capacity)
            return hit
        if self.semantics == "block":
            assert self.policy.capacity_kernel is not None, self.policy.name
            return self.policy.capacity_kernel(trace.ids, trace.distinct, capacity)
        return leading_reads(self.runs(capacity), trace.starts)

    def runs(self, capacity: int) -> np.ndarray:
        """Per request, the leading blocks a cache of ``capacity`` served (semantics
        ``prefix``, a policy simulated per capacity)."""
        capacity = self.bounded(capacity)
        if self.policy.prefix_pass == "hash_chain":
            paths, count = self.paths
            return fifo_prefix_hits(paths, self.trace.starts, count, capacity)
        assert self.tree is not None  # kept for every radix_tree pass
        parent, root = self.tree
        return radix_hits(self.paths[0], self.trace.starts, parent, root, capacity, self.next_use)


def _counted(
    trace: PrefixTrace, spec: PrefixCurveSpec, capacities: np.ndarray
) -> list[tuple[int, int, float]]:
    """Per capacity: measured hit blocks, hit tokens and the weighted hits (a request's
    reads weigh its share: summed in the order of a sort by distance, or of the reads, so
    that the float sums come out the same whatever the memory)."""
    by_request = spec.weight == "requests"
    shares = trace.shares() if by_request else np.zeros(0)
    first = trace.first_read
    simulation = PrefixSimulation(trace, spec.policy, spec.semantics)

    def as_counted(hits: int, hit_tokens: int, weighted: float) -> tuple[int, int, float]:
        unit = {"blocks": hits, "tokens": hit_tokens}.get(spec.weight, weighted)
        return hits, hit_tokens, float(unit)

    if simulation.distances is not None:  # every capacity from the one pass
        bounded = np.minimum(capacities, simulation.paths[1])
        counted, sums = distance_sums(
            simulation.distances, trace.starts, trace.tokens, shares, first, bounded
        )
        return [
            as_counted(int(h), int(t), float(w))
            for (h, t), w in zip(counted.tolist(), sums.tolist(), strict=True)
        ]

    def count(capacity: int) -> tuple[int, int, float]:
        if spec.semantics == "prefix" and not by_request:  # no mark per read
            hits, hit_tokens = run_sums(
                simulation.runs(capacity), trace.starts, trace.tokens, trace.measured_from
            )
            return as_counted(hits, hit_tokens, 0.0)
        hit = simulation.hits(capacity)
        hits, hit_tokens = hit_sums(hit, trace.tokens, first)
        weighted = (
            hit_weights(hit, trace.tokens, trace.starts, shares, first).sum() if by_request else 0.0
        )
        return as_counted(hits, hit_tokens, float(weighted))

    # the kernels release the GIL: one capacity per core, the largest (the slowest) first;
    # those that hold every block are one simulation
    largest_first = sorted({simulation.bounded(c) for c in capacities.tolist()}, reverse=True)
    with ThreadPoolExecutor(max_workers=max(1, min(len(capacities), os.cpu_count() or 1))) as pool:
        found = dict(zip(largest_first, pool.map(count, largest_first), strict=True))
    return [found[simulation.bounded(capacity)] for capacity in capacities.tolist()]


def prefix_request_rows(
    con: duckdb.DuckDBPyConnection,
    spec: PrefixCurveSpec,
    prefill_tok_s: float | None = None,
    cost_run: str | None = None,
) -> list[dict[str, Any]]:
    """The rows of ``workload_prefix_requests``: per run, capacity and request, the
    prompt tokens the cache served and the prefill time they save."""
    from kvtrace.analysis.kv_access.recompute import prefill_cost

    spec.check()
    if not spec.capacities and not spec.capacity_bytes:
        raise QueryError("name the cache capacity (capacities or capacity_bytes)")
    cost = prefill_cost(con, prefill_tok_s, cost_run)
    token_bytes = spec.token_bytes()
    rows = []
    for run_id, trace in _traces(con, spec.warmup):
        budgets = _budgets(spec, token_bytes, trace.block_tokens)
        simulation = PrefixSimulation(trace, spec.policy, spec.semantics)
        per_request = trace.tokens_per_request()
        for capacity in sorted(set(spec.capacities) | set(budgets)):
            hit = simulation.hits(capacity)
            blocks = np.concatenate([[0], np.cumsum(hit)])
            tokens = np.concatenate([[0], np.cumsum(np.where(hit, trace.tokens, 0))])
            hit_blocks = blocks[trace.starts[1:]] - blocks[trace.starts[:-1]]
            hit_tokens = tokens[trace.starts[1:]] - tokens[trace.starts[:-1]]
            for index in range(trace.requests):
                rows.append(
                    {
                        "run_id": run_id,
                        "policy": spec.policy,
                        "semantics": spec.semantics,
                        "capacity_blocks": capacity,
                        "request_idx": int(trace.request_idx[index]),
                        "counted": index >= trace.measured_from,
                        "tokens": int(per_request[index]),
                        "blocks": int(trace.starts[index + 1] - trace.starts[index]),
                        "hit_blocks": int(hit_blocks[index]),
                        "hit_tokens": int(hit_tokens[index]),
                        "ttft_saved_ms": float(hit_tokens[index]) * cost.seconds_per_token * 1e3,
                        "prefill_source": cost.source,
                    }
                )
    return rows


def _traces(
    con: duckdb.DuckDBPyConnection, warmup: float, runs: list[str] | None = None
) -> Iterator[tuple[str, PrefixTrace]]:
    """Each run and its trace, of every run with block hashes or of ``runs`` (each must
    have them).  A run without hashes reads as no requests: finding the runs that have
    them takes no query over every request's hashes."""
    listed = [
        row[0]
        for row in con.sql(
            "SELECT DISTINCT run_id FROM workload_requests WHERE run_id IS NOT NULL ORDER BY run_id"
        ).fetchall()
    ]
    for run in listed if runs is None else runs:
        trace = _load(con, run, warmup)
        if trace.requests:
            yield run, trace
        elif runs is not None:
            raise QueryError(
                f"run {run} has no block hashes (hash_ids), so no prefix cache can be "
                "simulated over it; Mooncake-format traces carry them"
            )
