"""The plan of one run's access stream: its requests, what item each block is, and when
each decode step runs.

A plan is read once per (run, block size) from small queries (one row per decode step,
per request), before the stream itself (`kvtrace.analysis.kv_access._stream`) is read:

- items: request r's block j is an item id; with scope ``request`` every request numbers
  its own blocks 0, 1, ...; with scope ``run`` ids are shared by the whole run, and with
  sharing ``content`` blocks with the same content key (``dsa_block_keys``) share one;
- slots: each decode step gets a slot, the unit of time the tiers are read in: its place
  in the run's time order with scope ``run`` (steps of one batch share a slot), the step
  itself with scope ``request``.  A slot has a time in seconds when the order has one;
- arrivals: a request arrives at its first step's slot.  With ``arrivals`` (a workload
  run) the order replays that run's arrival times instead: the i-th request of the DSA
  run arrives with the i-th arrival and runs its k-th traced step ``k x tpot`` later, on
  the server's tick of ``tpot`` (continuous batching);
- writes: when each content block first exists in the pool (a prompt block when its
  request arrives, a generated one when its request fills it), for the TTFT probes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np

from kvtrace.analysis.kv_access import (
    DEFAULT_TPOT_MS,
    GRANULARITIES,
    SCOPES,
    SHARINGS,
    Granularity,
    Scope,
    Sharing,
)
from kvtrace.errors import QueryError
from kvtrace.kernels.cache_sim import ItemIds
from kvtrace.kernels.priority_sim import Windows

_NEVER = np.iinfo(np.int64).max


@dataclass(frozen=True)
class StreamSpec:
    """Which access stream: block size, granularity, scope, sharing, the arrivals to
    replay (a workload run's id or name, scope ``run`` only) at ``tpot_ms`` per step, and
    the share of items kept by spatial sampling (``sample`` < 1: SHARDS, LRU only)."""

    block_size: int
    granularity: Granularity = "block"
    scope: Scope = "request"
    sharing: Sharing = "private"
    arrivals: str | None = None
    tpot_ms: float = DEFAULT_TPOT_MS
    sample: float = 1.0

    def check(self) -> None:
        """Raise `QueryError` with one sentence for a setting the stream cannot take."""
        if self.block_size is None or self.block_size < 1:
            raise QueryError(
                f"the block size must be a positive number of tokens, got {self.block_size}"
            )
        for name, value, allowed in (
            ("granularity", self.granularity, GRANULARITIES),
            ("scope", self.scope, SCOPES),
            ("sharing", self.sharing, SHARINGS),
        ):
            if value not in allowed:
                raise QueryError(f"unknown {name} {value!r}; expected one of " + ", ".join(allowed))
        if self.arrivals is not None and self.scope != "run":
            raise QueryError("replaying arrivals needs scope run (one pool for the run)")
        if not (self.tpot_ms > 0 and math.isfinite(self.tpot_ms)):
            raise QueryError(f"the time per decode step must be positive, got {self.tpot_ms}")
        if self.sample is None or not 0 < self.sample <= 1:
            raise QueryError(f"the sample rate must lie in (0, 1], got {self.sample}")

    @classmethod
    def checked(
        cls, block_size: Any, granularity: Any, scope: Any, sharing: Any, sample: Any = 1.0
    ) -> StreamSpec:
        """A spec from SQL arguments, checked."""
        spec = cls(block_size, granularity, scope, sharing, sample=sample)
        spec.check()
        return spec

    @property
    def layered(self) -> bool:
        return self.granularity == "layer_block"


@dataclass
class RunPlan:
    """Everything about a run's stream but the accesses themselves (see the module
    docstring).  Per-request arrays follow ``requests`` (ids ascending); per-step arrays
    are sorted by (request, step)."""

    run_id: str
    spec: StreamSpec
    stored_block_size: int
    layers: np.ndarray
    requests: np.ndarray
    block_offsets: np.ndarray  # request r's blocks are block items block_offsets[r]: ...
    block_items: np.ndarray  # ... whose item ids these are
    block_item_count: int  # distinct block items of the run (scope run)
    rules: dict[str, int]  # requests by how their blocks are named
    prompt_tokens: np.ndarray
    prefix_blocks: np.ndarray  # blocks of each request's cached prefix (pin_prefix)
    step_request: np.ndarray  # request index of each step
    step_idx: np.ndarray
    step_seq_len: np.ndarray  # tokens of the sequence at each step
    step_rows: np.ndarray  # stored rows of each step (one per traced layer)
    step_slot: np.ndarray
    slot_count: int
    slot_seconds: np.ndarray | None  # seconds since the run's first step, per slot
    order: str  # what the slots follow
    arrival_slot: np.ndarray  # per request: the slot of its first step
    first_write: np.ndarray  # per block item: the first slot it existed in (scope run)
    _windows: dict[int, Windows] = field(default_factory=dict)

    @property
    def layers_per_item(self) -> int:
        """Layers an item carries apart: 1 at ``block`` (all move together)."""
        return len(self.layers) if self.spec.layered else 1

    @property
    def items(self) -> int:
        """Item ids of the run (scope run) or of its largest request (scope request)."""
        if self.spec.scope == "run":
            return self.block_item_count * self.layers_per_item
        most = int(np.diff(self.block_offsets).max(initial=0))
        return most * self.layers_per_item

    def pinned_ranks(self) -> np.ndarray:
        """Scope run: each item's rank among the run's pinned prefix items (-1: not
        pinned), block-major, requests by id; a block shared by several requests once."""
        per = self.layers_per_item
        block_rank = np.full(self.block_item_count, -1, dtype=np.int64)
        pinned = np.concatenate(
            [
                self.block_items[self.block_offsets[r] : self.block_offsets[r] + blocks]
                for r, blocks in enumerate(self.prefix_blocks.tolist())
            ]
            or [np.zeros(0, np.int64)]
        )
        unique, first = np.unique(pinned, return_index=True)
        block_rank[unique[np.argsort(first)]] = np.arange(len(unique))
        ranks = np.repeat(block_rank * per, per) + np.tile(np.arange(per), len(block_rank))
        return np.where(np.repeat(block_rank, per) >= 0, ranks, -1)

    def pinned_items(self, request: int | None) -> int:
        """Pinned prefix items of request index ``request``, or of the whole run (shared
        blocks once) when None."""
        if request is not None:
            return int(self.prefix_blocks[request]) * self.layers_per_item
        ranks = self.pinned_ranks()
        return int((ranks >= 0).sum())

    def windows(self, tokens: int) -> Windows:
        """The sliding window of ``tokens`` tokens over the stream: at each step, the
        blocks holding the sequence's last ``tokens`` tokens (positions max(0, L - W) ..
        L - 1 for L tokens; none for W = 0), kept until the slot after the request's last
        step (scope run; a request's cache ends with it at scope request)."""
        if tokens not in self._windows:
            size = self.spec.block_size
            last = (self.step_seq_len - 1) // size
            first = np.maximum(self.step_seq_len - tokens, 0) // size if tokens else last + 1
            end = np.full(len(self.requests), -1, dtype=np.int64)
            np.maximum.at(end, self.step_request, self.step_slot)
            if self.spec.scope == "run":
                offsets, items = self.block_offsets, self.block_items
                release = np.argsort(end, kind="stable")
            else:  # each request's blocks are its own items 0, 1, ...
                offsets = np.zeros(len(self.requests), dtype=np.int64)
                items = np.arange(int(np.diff(self.block_offsets).max(initial=0)), dtype=np.int64)
                release = np.zeros(0, dtype=np.int64)
            self._windows[tokens] = Windows(
                self.step_request, first, last, offsets, items, self.layers_per_item, end, release
            )
        return self._windows[tokens]

    def prompt_items(self, request: int) -> np.ndarray:
        """Block items of the request's full prompt blocks, in block order."""
        blocks = int(self.prompt_tokens[request]) // self.spec.block_size
        start = int(self.block_offsets[request])
        end = min(start + blocks, int(self.block_offsets[request + 1]))
        return self.block_items[start:end]


def run_plans(
    con: duckdb.DuckDBPyConnection, spec: StreamSpec, runs: list[str] | None = None
) -> list[RunPlan]:
    """The plans of every run with DSA rows (or of ``runs``), by run id."""
    spec.check()
    found = con.sql(
        "SELECT run_id, min(block_size), list(DISTINCT layer_id ORDER BY layer_id) "
        "FROM _dsa_access_rows GROUP BY run_id ORDER BY run_id"
    ).fetchall()
    return [
        _plan(con, spec, run_id, int(stored), np.asarray(layers, dtype=np.int64))
        for run_id, stored, layers in found
        if runs is None or run_id in set(runs)
    ]


def _plan(
    con: duckdb.DuckDBPyConnection,
    spec: StreamSpec,
    run_id: str,
    stored_block_size: int,
    layers: np.ndarray,
) -> RunPlan:
    steps = con.sql(
        "SELECT p.request_id, p.step_idx, p.pool_step, p.ts_us, p.stream_order, c.rows, "
        "c.seq_len FROM _dsa_pool_steps AS p JOIN (SELECT request_id, step_idx, "
        "count(*) AS rows, max(seq_len) AS seq_len FROM _dsa_access_rows "
        "WHERE run_id = $run GROUP BY ALL) AS c USING (request_id, step_idx) "
        "WHERE p.run_id = $run ORDER BY p.request_id, p.step_idx",
        params={"run": run_id},
    ).fetchnumpy()
    request_id = np.asarray(steps["request_id"], dtype=np.int64)
    requests, step_request = np.unique(request_id, return_inverse=True)
    step_idx = np.asarray(steps["step_idx"], dtype=np.int64)
    seq_len = np.asarray(steps["seq_len"], dtype=np.int64)
    info = _requests(con, spec, run_id, requests)
    block_size = spec.block_size
    blocks_needed = np.zeros(len(requests), dtype=np.int64)
    np.maximum.at(blocks_needed, step_request, -(-seq_len // block_size))
    blocks_needed = np.maximum(blocks_needed, info["prompt_tokens"] // block_size)
    block_offsets = np.concatenate(([0], np.cumsum(blocks_needed))).astype(np.int64)
    block_items, count, rules = _number_blocks(con, spec, run_id, requests, block_offsets)
    slots, slot_count, seconds, order = _slots(con, spec, steps, step_request, step_idx)
    arrival = np.full(len(requests), _NEVER, dtype=np.int64)
    np.minimum.at(arrival, step_request, slots)
    plan = RunPlan(
        run_id=run_id,
        spec=spec,
        stored_block_size=stored_block_size,
        layers=layers,
        requests=requests,
        block_offsets=block_offsets,
        block_items=block_items,
        block_item_count=count,
        rules=rules,
        prompt_tokens=info["prompt_tokens"],
        prefix_blocks=info["prefix_blocks"],
        step_request=step_request.astype(np.int64),
        step_idx=step_idx,
        step_seq_len=seq_len,
        step_rows=np.asarray(steps["rows"], dtype=np.int64),
        step_slot=slots,
        slot_count=slot_count,
        slot_seconds=seconds,
        order=order,
        arrival_slot=arrival,
        first_write=np.zeros(0, dtype=np.int64),
    )
    if spec.scope == "run":
        plan.first_write = _first_writes(plan)
    return plan


def _requests(
    con: duckdb.DuckDBPyConnection, spec: StreamSpec, run_id: str, requests: np.ndarray
) -> dict[str, np.ndarray]:
    """Prompt length (0 when unknown) and pinned prefix blocks of each request."""
    rows = con.sql(
        "SELECT a.request_id, coalesce(r.prompt_tokens, 0), a.prefix_blocks "
        "FROM _dsa_access_prefix($bs) AS a LEFT JOIN requests AS r USING (run_id, request_id) "
        "WHERE a.run_id = $run ORDER BY a.request_id",
        params={"bs": spec.block_size, "run": run_id},
    ).fetchall()
    known = {int(r): (int(p), int(b or 0)) for r, p, b in rows}
    prompt = np.array([known.get(int(r), (0, 0))[0] for r in requests], dtype=np.int64)
    prefix = np.array([known.get(int(r), (0, 0))[1] for r in requests], dtype=np.int64)
    return {"prompt_tokens": prompt, "prefix_blocks": prefix}


def _number_blocks(
    con: duckdb.DuckDBPyConnection,
    spec: StreamSpec,
    run_id: str,
    requests: np.ndarray,
    block_offsets: np.ndarray,
) -> tuple[np.ndarray, int, dict[str, int]]:
    """The item id of every (request, block), how many there are, and the requests by
    sharing rule."""
    total = int(block_offsets[-1])
    counts = np.diff(block_offsets)
    local = np.arange(total, dtype=np.int64) - np.repeat(block_offsets[:-1], counts)
    if spec.scope == "request":  # each request numbers its own blocks
        return local, int(counts.max(initial=0)), {"private": len(requests)}
    keys = np.repeat(np.arange(len(requests), dtype=np.int64) << 32, counts) | local
    rules = {"private": len(requests)}
    if spec.sharing == "content":
        found = con.sql(
            "SELECT request_id, sharing_rule, block_keys FROM dsa_block_keys($bs) "
            "WHERE run_id = $run",
            params={"bs": spec.block_size, "run": run_id},
        ).fetchall()
        for request_id, rule, block_keys in found:
            index = int(np.searchsorted(requests, request_id))
            if index == len(requests) or requests[index] != request_id or not block_keys:
                continue
            start = int(block_offsets[index])
            n = min(len(block_keys), int(counts[index]))
            keys[start : start + n] = np.asarray(block_keys[:n], dtype=np.int64)
            rules[rule] = rules.get(rule, 0) + 1
            rules["private"] -= 1
    numbering = ItemIds()
    items = numbering.ids(keys)
    return items, numbering.count, {rule: n for rule, n in rules.items() if n}


def _slots(
    con: duckdb.DuckDBPyConnection,
    spec: StreamSpec,
    steps: dict[str, Any],
    step_request: np.ndarray,
    step_idx: np.ndarray,
) -> tuple[np.ndarray, int, np.ndarray | None, str]:
    """Each step's slot, the number of slots, each slot's time, and the order's name."""
    stamps = np.asarray(steps["ts_us"], dtype=np.float64)
    step_seconds = None
    if len(stamps) and not np.isnan(stamps).any():
        step_seconds = (stamps - stamps.min()) / 1e6
    if spec.arrivals is not None:
        ticks = _replayed(con, spec, step_request, step_idx)
        unique, slots = np.unique(ticks, return_inverse=True)
        order = f"arrivals of {spec.arrivals}, {spec.tpot_ms:g} ms per decode step"
        return slots.astype(np.int64), len(unique), unique * spec.tpot_ms / 1000, order
    order = str(steps["stream_order"][0]) if len(stamps) else "request"
    if spec.scope == "request":  # every step its own slot
        return np.arange(len(stamps), dtype=np.int64), len(stamps), step_seconds, order
    slots = np.asarray(steps["pool_step"], dtype=np.int64) - 1
    count = int(slots.max(initial=-1)) + 1
    seconds = None
    if step_seconds is not None:
        seconds = np.full(count, np.inf)
        np.minimum.at(seconds, slots, step_seconds)
    return slots, count, seconds, order


def _replayed(
    con: duckdb.DuckDBPyConnection,
    spec: StreamSpec,
    step_request: np.ndarray,
    step_idx: np.ndarray,
) -> np.ndarray:
    """The server tick of each step when the i-th request (by id) arrives with the
    workload's i-th arrival and decodes one traced step per tick of ``tpot``."""
    arrivals = [
        row[0]
        for row in con.sql(
            "SELECT w.arrival_s FROM workload_requests AS w "
            "WHERE w.run_id IN (SELECT run_id FROM runs_named([$name])) "
            "AND w.arrival_s IS NOT NULL ORDER BY w.arrival_s, w.request_idx",
            params={"name": spec.arrivals},
        ).fetchall()
    ]
    requests = int(step_request.max(initial=-1)) + 1
    if not arrivals:
        raise QueryError(
            f"run {spec.arrivals} has no arrival times to replay (ingest an arrival trace: "
            "Azure, BurstGPT, Mooncake)"
        )
    if len(arrivals) < requests:
        raise QueryError(
            f"run {spec.arrivals} has {len(arrivals)} arrivals for {requests} DSA requests"
        )
    tpot = spec.tpot_ms / 1000
    start = np.asarray(arrivals[:requests], dtype=np.float64)
    first_tick = np.ceil((start - start[0]) / tpot - 1e-9).astype(np.int64)
    step_number = np.arange(len(step_idx)) - np.searchsorted(step_request, step_request)
    ticks: np.ndarray = first_tick[step_request] + step_number
    return ticks


def _first_writes(plan: RunPlan) -> np.ndarray:
    """Per block item, the first slot it existed in the pool: a full prompt block's at
    its request's arrival, a generated block's once a traced step has filled it."""
    block_size = plan.spec.block_size
    counts = np.diff(plan.block_offsets)
    request_of = np.repeat(np.arange(len(plan.requests)), counts)
    block = np.arange(int(plan.block_offsets[-1])) - np.repeat(plan.block_offsets[:-1], counts)
    end_token = (block + 1) * block_size  # tokens held once the block is full
    written = np.full(len(block), _NEVER, dtype=np.int64)
    in_prompt = end_token <= plan.prompt_tokens[request_of]
    written[in_prompt] = plan.arrival_slot[request_of[in_prompt]]
    # a generated block is full after the step decoding its last token, position end - 1
    key = (plan.step_request << 32) | plan.step_idx
    wanted = (request_of << 32) | (end_token - 1)
    at = np.searchsorted(key, wanted)
    found = (~in_prompt) & (at < len(key))
    same = np.zeros(len(block), dtype=bool)
    same[found] = plan.step_request[at[found]] == request_of[found]
    written[same] = plan.step_slot[at[same]]
    first = np.full(plan.block_item_count, _NEVER, dtype=np.int64)
    np.minimum.at(first, plan.block_items, written)
    return first
