"""Cache policies over a run's access stream: hit curves, reuse histograms, tier levels and
what a request finds of its prompt in the pool when it arrives.

Each unit (a request, or a run for scope ``run``) is simulated by the pass its policy
names (`kvtrace.analysis.policies`; the passes are in ``_passes``), fed the unit's chunks
in order.  Capacities count items of the chosen granularity; a first touch is a miss.  A
*shared hit* is a hit on a request's first touch of an item: another request brought it
in (possible only in a shared pool, sharing ``content``).

Policies:

- ``lru``: one stack-distance pass answers every capacity (hit iff distance < capacity),
  and the tiers are an exclusive LRU hierarchy (tier k holds stack positions
  C[k-1] .. C[k] - 1 for cumulative capacities C): exact, from the same pass.
- ``fifo``: the curve is simulated once per capacity; the tiers are simulated live, tier
  by tier (`kvtrace.kernels.cache_sim.TierCache`): an item a tier evicts is demoted to
  the next, a hit in a lower tier is promoted to the first.
- ``opt``: Belady's MIN, once per capacity (the curve) and per cumulative capacity (the
  tiers: a ceiling, not a hierarchy anyone runs).  It knows the future, so it gets no
  arrival probes.
- ``pin_prefix``: the unit's pinned prefix items (the prefix regions of prefix-cache
  hits, all layers of them at ``layer_block``; in a shared pool each shared block once)
  are resident from the start and never evicted; they take ``min(P, C)`` of the capacity
  (in rank order) and an access to one is a hit.  The rest share what is left under LRU.
- ``sliding_window``, ``lfu``, ``score``: a full cache evicts its item of lowest
  priority, the least recently used among equals: outside every window before inside
  one (a decoding request's window holds the blocks of its last ``window_tokens``
  tokens, all layers of them at ``layer_block``, from its step on until the slot after
  its last step), fewest accesses since the unit's stream began, lowest score at the
  latest access (the largest score of the positions its step selected in the block, all
  layers at ``block``).  Every capacity at once (`_priority.PriorityPass`); the tiers
  are the caches at the cumulative capacities, which nest.

With ``subblocks``, each access also counts, per tier, the tokens fetched when each layer
reads only the sub-blocks of b tokens it touched in the block (`RunOutcome.packing`).

When tiers are given (cumulative capacities of the bounded ones, the last tier
unbounded), every access is counted per (slot, tier); a first touch is read from the last
tier.  With sharing ``content`` and scope ``run``, each request is *probed* when it
arrives: the leading run of its full prompt blocks that other requests already wrote to
the pool, and the tier each of their items sits in (`Probe`).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import duckdb
import numpy as np

from kvtrace.analysis.kv_access import DEFAULT_WINDOW_TOKENS
from kvtrace.analysis.kv_access._passes import (
    Counts,
    GatheredPass,
    LruPass,
    UnitOutcome,
    UnitPass,
    unit_pass,
)
from kvtrace.analysis.kv_access._priority import PriorityPass
from kvtrace.analysis.kv_access._stream import (
    Chunk,
    StreamReader,
    Window,
    check_scores,
    thread_shares,
    windows,
)
from kvtrace.analysis.kv_access.plan import RunPlan
from kvtrace.analysis.policies import CachePolicy
from kvtrace.prefetch import prefetched
from kvtrace.sql.catalog import cursor_of

__all__ = ["Probe", "RunOutcome", "simulate_run"]


@dataclass
class Probe:
    """What request ``request`` (an index of the plan) found of its prompt when it
    arrived: ``blocks`` reusable full blocks (the leading run other requests had written)
    and how many of their items each tier held."""

    request: int
    blocks: int
    tier_items: np.ndarray


@dataclass
class RunOutcome:
    """A run's units (in stream order) and what was counted over all of them."""

    units: list[UnitOutcome]
    slot_levels: np.ndarray  # accesses per (slot, tier)
    shared_levels: np.ndarray  # shared hits per tier
    second_items: np.ndarray | None  # distinct items touched per second of the slots' time
    probes: list[Probe] = field(default_factory=list)
    replicated: dict[int, tuple[int, int]] = field(default_factory=dict)  # tier: blocks, reads
    plan: RunPlan | None = None  # the run's plan, when the outcome is the whole run's
    packing: np.ndarray | None = None  # tokens fetched per (tier, sub-block size)

    def add(self, other: RunOutcome) -> None:
        """Fold in ``other`` (a later share of the same run)."""
        self.units = self.units + other.units
        self.slot_levels = self.slot_levels + other.slot_levels  # parts may be read-only
        self.shared_levels = self.shared_levels + other.shared_levels
        if self.second_items is not None and other.second_items is not None:
            self.second_items = self.second_items + other.second_items
        self.probes += other.probes
        if self.packing is not None and other.packing is not None:
            self.packing = self.packing + other.packing
        for tier, (blocks, reads) in other.replicated.items():
            had = self.replicated.get(tier, (0, 0))
            self.replicated[tier] = (had[0] + blocks, had[1] + reads)


def simulate_run(
    con: duckdb.DuckDBPyConnection,
    plan: RunPlan,
    policy: CachePolicy,
    named: np.ndarray,
    limits: np.ndarray,
    requests: tuple[int, int] | None = None,
    threads: int = 1,
    watched: dict[int, int] | None = None,
    window_tokens: int = DEFAULT_WINDOW_TOKENS,
    subblocks: tuple[int, ...] = (),
) -> RunOutcome:
    """Run ``policy`` over the stream of ``plan`` (its requests with indices in the closed
    range ``requests`` only, when given: a share of scope ``request``).

    ``limits`` are the cumulative capacities of every tier but the last (may be empty);
    ``named`` capacities get their own hits.  Scope ``request`` reads its windows on up to
    ``threads`` threads (each with a cursor of ``con``).  ``watched`` maps a tier to the
    copies replicating it keeps: each unit's items that tier read at least that many times
    are counted, with their reads (`RunOutcome.replicated`).  ``window_tokens`` sizes the
    sliding window; ``subblocks`` are the sub-block sizes whose fetched tokens are
    counted."""
    if policy.priority == "score":
        check_scores(con, plan)
    options = _Options(watched or {}, window_tokens, subblocks)
    parts = windows(plan, requests)
    if plan.spec.scope == "run" or threads <= 1 or len(parts) <= 1:
        return _simulate_windows(con, plan, policy, named, limits, parts, options)
    shares = thread_shares(plan, parts, threads)
    with ThreadPoolExecutor(max_workers=len(shares)) as pool:
        outcomes = list(
            pool.map(
                lambda share: _simulate_windows(
                    cursor_of(con), plan, policy, named, limits, share, options
                ),
                shares,
            )
        )
    merged = outcomes[0]
    for outcome in outcomes[1:]:
        merged.add(outcome)
    return merged


@dataclass(frozen=True)
class _Options:
    """What a simulation counts besides its curve (see `simulate_run`)."""

    watched: dict[int, int]
    window_tokens: int
    subblocks: tuple[int, ...]


def _simulate_windows(
    con: duckdb.DuckDBPyConnection,
    plan: RunPlan,
    policy: CachePolicy,
    named: np.ndarray,
    limits: np.ndarray,
    parts: list[Window],
    options: _Options,
) -> RunOutcome:
    tiers = len(limits) + 1
    counts = _counts(plan, tiers)
    units: list[UnitOutcome] = []
    probes: list[Probe] = []
    replicated: dict[int, tuple[int, int]] = {}
    reader = StreamReader(con, plan, policy.priority == "score", options.subblocks)
    packing = np.zeros((tiers, len(options.subblocks)), np.int64) if options.subblocks else None
    current: _UnitRun | None = None
    for chunk in prefetched(
        (chunk for part in parts for chunk in reader.chunks(part)), depth=2, name="kvtrace-stream"
    ):
        if current is None or chunk.unit != current.unit:
            if current is not None:
                units.append(current.finish())
            current = _UnitRun(
                plan, policy, named, limits, chunk.unit, counts, probes, options.window_tokens
            )
            current.packing = packing
            current.watch(options.watched, replicated)
        current.feed(chunk)
    if current is not None:
        units.append(current.finish())
    return RunOutcome(
        units,
        counts.slot_levels,
        counts.shared_levels,
        counts.second_items,
        probes,
        replicated,
        packing=packing,
    )


def _counts(plan: RunPlan, tiers: int) -> Counts:
    """Empty counts of the run's slots and tiers (and seconds, when the slots have times)."""
    seconds = (
        None
        if plan.slot_seconds is None
        else np.floor(plan.slot_seconds - plan.slot_seconds.min(initial=0)).astype(np.int64)
    )
    return Counts(
        np.zeros((plan.slot_count, tiers), dtype=np.int64),
        np.zeros(tiers, dtype=np.int64),
        seconds,
        None if seconds is None else np.zeros(int(seconds.max(initial=0)) + 1, np.int64),
    )


class _UnitRun:
    """One unit's simulation, its arrival probes and its working set per second."""

    def __init__(
        self,
        plan: RunPlan,
        policy: CachePolicy,
        named: np.ndarray,
        limits: np.ndarray,
        unit: int | None,
        counts: Counts,
        probes: list[Probe],
        window_tokens: int,
    ) -> None:
        self.plan, self.named, self.unit = plan, named, unit
        self.counts, self.probes, self.tiers = counts, probes, len(limits) + 1
        self.simulation: UnitPass | PriorityPass = (
            PriorityPass(limits, named, policy, plan, window_tokens)
            if policy.block_pass == "priority"
            else unit_pass(
                policy,
                limits,
                plan.spec.sample,
                0 if unit is None else unit + 1,
                lambda: (plan.pinned_items(unit), _rank_lookup(plan, unit)),
            )
        )
        self.last_second = (
            np.full(plan.items, -1, dtype=np.int32) if counts.seconds is not None else None
        )
        probing = (
            plan.spec.scope == "run"
            and plan.spec.sharing == "content"
            and not policy.knows_future
            and plan.spec.sample == 1
        )
        self.arrivals = (
            np.argsort(plan.arrival_slot, kind="stable") if probing else np.zeros(0, np.int64)
        )
        self.next_arrival = 0
        self.watched: dict[int, int] = {}
        self.reads: dict[int, np.ndarray] = {}
        self.replicated: dict[int, tuple[int, int]] = {}
        self.packing: np.ndarray | None = None  # tokens fetched per (tier, sub-block size)
        self.pending: list[np.ndarray] = []  # tokens of accesses whose tier comes at the end

    def watch(self, watched: dict[int, int], replicated: dict[int, tuple[int, int]]) -> None:
        """Count each item's reads from the tiers in ``watched`` (tier -> copies), to add
        the unit's replicated items and their reads to ``replicated``."""
        self.watched, self.replicated = watched, replicated
        self.reads = {tier: np.zeros(self.plan.items, dtype=np.int64) for tier in watched}
        if isinstance(self.simulation, LruPass):
            self.simulation.want_levels = bool(watched) or self.packing is not None

    def feed(self, chunk: Chunk) -> None:
        start = 0
        while self.next_arrival < len(self.arrivals):  # probe each request as it arrives
            request = int(self.arrivals[self.next_arrival])
            at = int(np.searchsorted(chunk.slots, self.plan.arrival_slot[request], side="left"))
            if at >= len(chunk.slots):
                break
            self._feed(chunk, start, at)
            self.probes.append(_probe(self.plan, self.simulation, request, self.tiers))
            start = at
            self.next_arrival += 1
        self._feed(chunk, start, len(chunk.items))

    def _feed(self, chunk: Chunk, start: int, end: int) -> None:
        if end <= start:
            return
        items, first = chunk.items[start:end], chunk.own_first[start:end]
        slots = chunk.slots[start:end]
        levels: np.ndarray | None
        if isinstance(self.simulation, PriorityPass):
            scores = None if chunk.scores is None else chunk.scores[start:end]
            levels = self.simulation.feed(
                items, first, slots, self.counts, chunk.steps[start:end], scores
            )
        else:
            levels = self.simulation.feed(items, first, slots, self.counts)
        tokens = None if chunk.tokens is None else chunk.tokens[start:end]
        if levels is not None:
            self._count_reads(items, levels)
            self._count_packing(levels, tokens)
        elif tokens is not None:
            self.pending.append(tokens)
        if self.last_second is not None:
            self.counts.working_set(items, slots, self.last_second)

    def _count_packing(self, levels: np.ndarray, tokens: np.ndarray | None) -> None:
        """Add each access's sub-block tokens to its tier's."""
        if self.packing is None or tokens is None:
            return
        for j in range(tokens.shape[1]):
            self.packing[:, j] += np.bincount(levels, tokens[:, j], self.tiers).astype(np.int64)

    def _count_reads(self, items: np.ndarray, levels: np.ndarray) -> None:
        for tier, reads in self.reads.items():
            reads += np.bincount(items[levels == tier], minlength=len(reads))

    def finish(self) -> UnitOutcome:
        if isinstance(self.simulation, GatheredPass):
            outcome, served = self.simulation.finish(self.named)
            if served is not None:
                items, slots, levels, shared = served
                self.counts.levels(slots, levels, shared)
                self._count_reads(items.astype(np.int64), levels)
                if self.pending:
                    self._count_packing(levels, np.concatenate(self.pending))
        else:
            outcome = self.simulation.finish(self.named)
        for tier, reads in self.reads.items():
            hot = reads >= self.watched[tier]
            blocks, moved = self.replicated.get(tier, (0, 0))
            self.replicated[tier] = (blocks + int(hot.sum()), moved + int(reads[hot].sum()))
        return outcome


def _probe(plan: RunPlan, simulation: UnitPass | PriorityPass, request: int, tiers: int) -> Probe:
    """The leading run of the request's prompt blocks written before it arrived, and the
    tier of each of their items now."""
    blocks = plan.prompt_items(request)
    written = plan.first_write[blocks] < plan.arrival_slot[request]
    run = int(np.argmin(written)) if not written.all() else len(blocks)
    if run == 0:
        return Probe(request, 0, np.zeros(tiers, dtype=np.int64))
    per = plan.layers_per_item
    items = (blocks[:run, None] * per + np.arange(per)).ravel()
    levels = simulation.peek(items)
    return Probe(request, run, np.bincount(levels, minlength=tiers))


def _rank_lookup(plan: RunPlan, unit: int | None) -> Callable[[np.ndarray], np.ndarray]:
    """Each item's rank among the unit's pinned prefix items, -1 if not pinned."""
    if unit is not None:  # a request's own items: blocks 0 .. P - 1 come first
        pinned = plan.pinned_items(unit)
        return lambda items: np.where(items < pinned, items, -1)
    ranks = plan.pinned_ranks()
    return lambda items: ranks[items]
