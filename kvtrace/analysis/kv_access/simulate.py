"""Cache policies over a run's access stream: hit curves, reuse histograms, tier levels and
what a request finds of its prompt in the pool when it arrives.

Each unit (a request, or a run for scope ``run``) is simulated by a policy object fed the
unit's chunks in order.  Capacities count items of the chosen granularity; a first touch
is a miss.  A *shared hit* is a hit on a request's first touch of an item: another
request brought it in (possible only in a shared pool, sharing ``content``).

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

When tiers are given (cumulative capacities of the bounded ones, the last tier
unbounded), every access is counted per (slot, tier); a first touch is read from the last
tier.  With sharing ``content`` and scope ``run``, each request is *probed* when it
arrives: the leading run of its full prompt blocks that other requests already wrote to
the pool, and the tier each of their items sits in (`Probe`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import duckdb
import numpy as np

from kvtrace.analysis.kv_access import Policy
from kvtrace.analysis.kv_access._stream import Chunk, StreamReader, Window, windows
from kvtrace.analysis.kv_access.plan import RunPlan
from kvtrace.kernels.access_items import distinct_per_bucket, first_touches
from kvtrace.kernels.cache_sim import (
    LruStack,
    TierCache,
    dense_ids,
    fifo_hits,
    opt_hits,
    tally_distances,
)
from kvtrace.kernels.sampling import sampled
from kvtrace.prefetch import prefetched
from kvtrace.sql.catalog import cursor_of


@dataclass
class UnitOutcome:
    """What one cache unit saw and hit."""

    accesses: int
    distinct: int  # items touched
    first_touches: int
    span: int  # capacity from which on every access but the cold misses hits
    grid_hits: np.ndarray  # hits at capacity 2**k for k = 0, 1, ...; beyond: saturated
    grid_shared: np.ndarray  # shared hits at the same capacities
    saturated: tuple[int, int]  # hits and shared hits once everything fits
    named_hits: np.ndarray  # hits at the named capacities
    named_shared: np.ndarray
    distance_hist: np.ndarray | None = None  # LRU: accesses per stack distance
    shared_hist: np.ndarray | None = None  # LRU: shared first touches per stack distance

    def at_grid(self, length: int) -> tuple[np.ndarray, np.ndarray]:
        """Hits and shared hits at capacities 2**0 .. 2**(length - 1)."""

        def extend(values: np.ndarray, fill: int) -> np.ndarray:
            return np.concatenate([values[:length], np.full(length - len(values[:length]), fill)])

        return extend(self.grid_hits, self.saturated[0]), extend(
            self.grid_shared, self.saturated[1]
        )


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

    def add(self, other: RunOutcome) -> None:
        """Fold in ``other`` (a later share of the same run)."""
        self.units = self.units + other.units
        self.slot_levels = self.slot_levels + other.slot_levels  # parts may be read-only
        self.shared_levels = self.shared_levels + other.shared_levels
        if self.second_items is not None and other.second_items is not None:
            self.second_items = self.second_items + other.second_items
        self.probes += other.probes
        for tier, (blocks, reads) in other.replicated.items():
            had = self.replicated.get(tier, (0, 0))
            self.replicated[tier] = (had[0] + blocks, had[1] + reads)


def grid(span: int) -> np.ndarray:
    """Capacities 1, 2, 4, ... up to the first power of two >= ``span``."""
    return 2 ** np.arange(max(int(span) - 1, 0).bit_length() + 1, dtype=np.int64)


def counts_below(hist: np.ndarray, capacities: np.ndarray) -> np.ndarray:
    """For each capacity C: how many observations of ``hist`` (per value) are < C."""
    cumulative = np.concatenate(([0], np.cumsum(hist)))
    below: np.ndarray = cumulative[np.clip(capacities, 0, len(hist))]
    return below


def _fraction_below(hist: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """For each bound x: the observations of ``hist`` (per value d) below x, when the
    observation d stands for a value spread evenly over [d, d + 1)."""
    cumulative = np.concatenate(([0], np.cumsum(hist)))
    whole = np.clip(np.floor(bounds).astype(np.int64), 0, len(hist))
    part = np.where(whole < len(hist), bounds - whole, 0.0)
    padded = np.concatenate([hist, [0]])
    below: np.ndarray = cumulative[whole] + padded[whole] * part
    return below


def _levels_of_distances(distances: np.ndarray, limits: np.ndarray) -> np.ndarray:
    """The tier of each access from its LRU distance: the first whose cumulative capacity
    exceeds it; the last tier for first touches (distance -1)."""
    levels = np.searchsorted(limits, distances, side="right")
    levels[distances < 0] = len(limits)
    return levels


def _add_hist(hist: np.ndarray, values: np.ndarray) -> np.ndarray:
    counts = np.bincount(values)
    if len(counts) > len(hist):
        hist = np.concatenate([hist, np.zeros(len(counts) - len(hist), dtype=np.int64)])
    hist[: len(counts)] += counts
    return hist


class _Lru:
    """LRU over a unit fed chunk by chunk (nothing of the stream is kept).

    At a sample ``rate`` below 1 only the accesses to sampled items are simulated
    (`kvtrace.kernels.sampling`) and `finish` scales the curve back (SHARDS-adj); the
    tiers are then not counted."""

    def __init__(self, limits: np.ndarray, rate: float = 1.0, salt: int = 0) -> None:
        self.limits = limits
        self.rate, self.salt = rate, salt
        self.want_levels = False  # whether feed returns each access's tier
        self.stack = LruStack()
        self.hist = np.zeros(0, dtype=np.int64)
        self.shared_hist = np.zeros(0, dtype=np.int64)
        self.accesses = self.cold = self.offered = 0

    def feed(
        self, items: np.ndarray, first: np.ndarray, slots: np.ndarray, counts: _Counts
    ) -> np.ndarray | None:
        """Count the accesses; their tiers when ``want_levels``."""
        self.offered += len(items)
        if self.rate < 1:
            kept = sampled(items, self.rate, self.salt)
            items, first, slots = items[kept], first[kept], slots[kept]
        distances = self.stack.distances(items)
        size = self.stack.distinct + 1
        if size > len(self.hist):
            self.hist = _grown(self.hist, size)
            self.shared_hist = _grown(self.shared_hist, size)
        self.accesses += len(distances)
        self.cold += tally_distances(
            distances,
            first,
            slots,
            self.limits,
            self.hist,
            self.shared_hist,
            counts.slot_levels,
            counts.shared_levels,
        )
        return _levels_of_distances(distances, self.limits) if self.want_levels else None

    def peek(self, items: np.ndarray) -> np.ndarray:
        """The tier each item would be served from now (the last: not cached)."""
        return _levels_of_distances(self.stack.peek(items), self.limits)

    def finish(self, named: np.ndarray) -> UnitOutcome:
        if self.rate < 1:
            return self._scaled(named)
        distinct = self.stack.distinct
        capacities = grid(distinct)
        return UnitOutcome(
            self.accesses,
            distinct,
            self.cold,
            distinct,
            counts_below(self.hist, capacities),
            counts_below(self.shared_hist, capacities),
            (self.accesses - self.cold, int(self.shared_hist.sum())),
            counts_below(self.hist, named),
            counts_below(self.shared_hist, named),
            self.hist,
            self.shared_hist,
        )

    def _scaled(self, named: np.ndarray) -> UnitOutcome:
        """The unit's curve estimated from its sample: a sampled distance d stands for a
        distance spread evenly over [d / rate, (d + 1) / rate), a sampled access for
        1 / rate accesses, and the difference between the accesses seen and those the
        sample stands for is added to the hits of the shortest distances, [0, 1 / rate)
        (SHARDS-adj: it corrects a sample that came out larger or smaller than expected,
        mostly by the hottest items)."""
        scale = 1.0 / self.rate
        adjust = self.offered - self.accesses * scale
        distinct = round(self.stack.distinct * scale)
        capacities = grid(distinct)

        def estimate(hist: np.ndarray, at: np.ndarray, extra: float) -> np.ndarray:
            below = _fraction_below(hist, at * self.rate)
            estimated = np.rint(below * scale + extra * np.clip(at * self.rate, 0.0, 1.0))
            return np.clip(estimated, 0, self.offered).astype(np.int64)

        hits = int(np.clip(round((self.accesses - self.cold) * scale + adjust), 0, self.offered))
        return UnitOutcome(
            self.offered,
            distinct,
            self.offered - hits,
            distinct,
            estimate(self.hist, capacities, adjust),
            estimate(self.shared_hist, capacities, 0.0),
            (hits, round(int(self.shared_hist.sum()) * scale)),
            estimate(self.hist, named, adjust),
            estimate(self.shared_hist, named, 0.0),
        )


def _grown(hist: np.ndarray, size: int) -> np.ndarray:
    return np.concatenate([hist, np.zeros(max(size, 2 * len(hist)) - len(hist), np.int64)])


class _PinPrefix(_Lru):
    """Pinned prefix items always hit; the rest is LRU in the capacity left."""

    def __init__(
        self, limits: np.ndarray, pinned: int, rank_of: Callable[[np.ndarray], np.ndarray]
    ) -> None:
        super().__init__(limits)
        self.pinned = pinned
        self.rank_of = rank_of
        self.rank_hist = np.zeros(max(pinned, 1), dtype=np.int64)
        self.shared_rank_hist = np.zeros(max(pinned, 1), dtype=np.int64)
        self.seen: np.ndarray = np.zeros(0, dtype=np.bool_)

    def feed(
        self, items: np.ndarray, first: np.ndarray, slots: np.ndarray, counts: _Counts
    ) -> np.ndarray | None:
        rank = self.rank_of(items)
        is_pinned = rank >= 0
        if len(items) and int(items.max()) >= len(self.seen):
            grown = np.zeros(max(int(items.max()) + 1, 2 * len(self.seen)), dtype=np.bool_)
            grown[: len(self.seen)] = self.seen
            self.seen = grown
        ever = ~first_touches(items, self.seen)  # touched before, by any request
        pinned_rank = rank[is_pinned]
        self.rank_hist += np.bincount(pinned_rank, minlength=len(self.rank_hist))
        shared_pinned = (first & ever)[is_pinned]
        self.shared_rank_hist += np.bincount(
            pinned_rank[shared_pinned], minlength=len(self.rank_hist)
        )
        distances = np.full(len(items), -1, dtype=np.int64)
        distances[~is_pinned] = self.stack.distances(items[~is_pinned])
        reused = (distances >= 0) & ~is_pinned
        self.accesses += len(items)
        self.cold += int((~is_pinned).sum() - reused.sum())
        self.hist = _add_hist(self.hist, distances[reused])
        self.shared_hist = _add_hist(self.shared_hist, distances[reused & first])
        levels = np.where(
            is_pinned,
            np.searchsorted(self.limits, rank, side="right"),
            _levels_of_distances(distances, self.limits - self.pinned),
        )
        counts.levels(slots, levels, first & ever & (is_pinned | reused))
        return levels

    def peek(self, items: np.ndarray) -> np.ndarray:
        rank = self.rank_of(items)
        rest = _levels_of_distances(self.stack.peek(items), self.limits - self.pinned)
        return np.where(rank >= 0, np.searchsorted(self.limits, rank, side="right"), rest)

    def _hits(self, hist: np.ndarray, rank_hist: np.ndarray, capacities: np.ndarray) -> np.ndarray:
        rest = counts_below(hist, np.maximum(capacities - self.pinned, 0))
        return np.where(
            capacities >= self.pinned,
            int(rank_hist.sum()) + rest,
            counts_below(rank_hist, capacities),
        )

    def finish(self, named: np.ndarray) -> UnitOutcome:
        span = self.pinned + self.stack.distinct
        capacities = grid(span)
        return UnitOutcome(
            self.accesses,
            self.stack.distinct + int((self.rank_hist > 0).sum()),
            self.cold,
            span,
            self._hits(self.hist, self.rank_hist, capacities),
            self._hits(self.shared_hist, self.shared_rank_hist, capacities),
            (
                self.accesses - self.cold,
                int(self.shared_hist.sum() + self.shared_rank_hist.sum()),
            ),
            self._hits(self.hist, self.rank_hist, named),
            self._hits(self.shared_hist, self.shared_rank_hist, named),
        )


class _Gathered:
    """FIFO or OPT: the unit's stream is gathered, then simulated once per capacity.
    FIFO's tiers are simulated live as it comes; OPT's at the end."""

    def __init__(self, limits: np.ndarray, policy: Policy) -> None:
        self.limits = limits
        self.policy = policy
        self.items: list[np.ndarray] = []
        self.first: list[np.ndarray] = []
        self.slots: list[np.ndarray] = []
        self.tiers = TierCache(np.diff(limits, prepend=0).tolist(), "fifo")

    def feed(
        self, items: np.ndarray, first: np.ndarray, slots: np.ndarray, counts: _Counts
    ) -> np.ndarray | None:
        narrow = np.int32 if len(items) == 0 or items.max() < 2**31 else np.int64
        self.items.append(items.astype(narrow))
        self.first.append(first)
        if self.policy == "opt":
            self.slots.append(slots)
            return None
        levels = self.tiers.access(items)
        shared = first & (levels >= 0)
        levels[levels < 0] = len(self.limits)
        counts.levels(slots, levels, shared)
        return levels

    def peek(self, items: np.ndarray) -> np.ndarray:
        levels = self.tiers.peek(items)
        levels[levels < 0] = len(self.limits)
        return levels

    def finish(
        self, named: np.ndarray
    ) -> tuple[UnitOutcome, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None]:
        """The outcome, and for OPT the (items, slots, levels, shared) of every access."""
        gathered = np.concatenate(self.items) if self.items else np.zeros(0, np.int64)
        ids, distinct = dense_ids(gathered)
        first = np.concatenate(self.first) if self.first else np.zeros(0, dtype=bool)
        accesses = len(ids)
        cold = np.zeros(accesses, dtype=bool)
        cold[np.unique(ids, return_index=True)[1]] = True
        simulate = fifo_hits if self.policy == "fifo" else opt_hits
        masks: dict[int, np.ndarray] = {}

        def mask(capacity: int) -> np.ndarray:
            if capacity >= distinct:
                return ~cold
            if capacity not in masks:
                masks[capacity] = simulate(ids, distinct, capacity)
            return masks[capacity]

        def hits(capacities: Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
            found = [mask(int(c)) for c in capacities]
            return (
                np.array([int(m.sum()) for m in found], dtype=np.int64),
                np.array([int((m & first).sum()) for m in found], dtype=np.int64),
            )

        grid_hits, grid_shared = hits(grid(distinct))
        named_hits, named_shared = hits(named)
        outcome = UnitOutcome(
            accesses,
            distinct,
            distinct,
            distinct,
            grid_hits,
            grid_shared,
            (accesses - distinct, int((~cold & first).sum())),
            named_hits,
            named_shared,
        )
        if self.policy != "opt":
            return outcome, None
        level = np.full(accesses, len(self.limits), dtype=np.int64)
        for index in range(len(self.limits) - 1, -1, -1):
            level[mask(int(self.limits[index]))] = index
        served = np.concatenate(self.slots) if self.slots else np.zeros(0, np.int64)
        return outcome, (gathered, served, level, first & ~cold)


@dataclass
class _Counts:
    """What a run's units add up to besides their curves."""

    slot_levels: np.ndarray
    shared_levels: np.ndarray
    seconds: np.ndarray | None  # per slot: its second (None: the order has no time)
    second_items: np.ndarray | None

    def levels(self, slots: np.ndarray, levels: np.ndarray, shared: np.ndarray) -> None:
        if len(slots) == 0:
            return
        tiers = self.slot_levels.shape[1]
        low, high = int(slots[0]), int(slots[-1])
        counts = np.bincount((slots - low) * tiers + levels, minlength=(high - low + 1) * tiers)
        self.slot_levels[low : high + 1] += counts.reshape(-1, tiers)
        self.shared_levels += np.bincount(levels[shared], minlength=tiers)

    def working_set(self, items: np.ndarray, slots: np.ndarray, last_second: np.ndarray) -> None:
        if self.seconds is None or self.second_items is None or len(items) == 0:
            return
        distinct_per_bucket(items, self.seconds[slots], last_second, self.second_items)


def simulate_run(
    con: duckdb.DuckDBPyConnection,
    plan: RunPlan,
    policy: Policy,
    named: np.ndarray,
    limits: np.ndarray,
    requests: tuple[int, int] | None = None,
    threads: int = 1,
    watched: dict[int, int] | None = None,
) -> RunOutcome:
    """Run ``policy`` over the stream of ``plan`` (its requests with indices in the closed
    range ``requests`` only, when given: a share of scope ``request``).

    ``limits`` are the cumulative capacities of every tier but the last (may be empty);
    ``named`` capacities get their own hits.  Scope ``request`` reads its windows on up to
    ``threads`` threads (each with a cursor of ``con``).  ``watched`` maps a tier to the
    copies replicating it keeps: each unit's items that tier read at least that many times
    are counted, with their reads (`RunOutcome.replicated`)."""
    watched = watched or {}
    parts = windows(plan, requests)
    if plan.spec.scope == "run" or threads <= 1 or len(parts) <= 1:
        return _simulate_windows(con, plan, policy, named, limits, parts, watched)
    groups = [list(g) for g in np.array_split(np.arange(len(parts)), threads) if len(g)]
    with ThreadPoolExecutor(max_workers=len(groups)) as pool:
        outcomes = list(
            pool.map(
                lambda g: _simulate_windows(
                    cursor_of(con), plan, policy, named, limits, [parts[i] for i in g], watched
                ),
                groups,
            )
        )
    merged = outcomes[0]
    for outcome in outcomes[1:]:
        merged.add(outcome)
    return merged


def _simulate_windows(
    con: duckdb.DuckDBPyConnection,
    plan: RunPlan,
    policy: Policy,
    named: np.ndarray,
    limits: np.ndarray,
    parts: list[Window],
    watched: dict[int, int],
) -> RunOutcome:
    tiers = len(limits) + 1
    seconds = (
        None
        if plan.slot_seconds is None
        else np.floor(plan.slot_seconds - plan.slot_seconds.min(initial=0)).astype(np.int64)
    )
    counts = _Counts(
        np.zeros((plan.slot_count, tiers), dtype=np.int64),
        np.zeros(tiers, dtype=np.int64),
        seconds,
        None if seconds is None else np.zeros(int(seconds.max(initial=0)) + 1, np.int64),
    )
    units: list[UnitOutcome] = []
    probes: list[Probe] = []
    replicated: dict[int, tuple[int, int]] = {}
    reader = StreamReader(con, plan)
    current: _UnitRun | None = None
    for chunk in prefetched(
        (chunk for part in parts for chunk in reader.chunks(part)), depth=2, name="kvtrace-stream"
    ):
        if current is None or chunk.unit != current.unit:
            if current is not None:
                units.append(current.finish())
            current = _UnitRun(plan, policy, named, limits, chunk.unit, counts, probes)
            current.watch(watched, replicated)
        current.feed(chunk)
    if current is not None:
        units.append(current.finish())
    return RunOutcome(
        units, counts.slot_levels, counts.shared_levels, counts.second_items, probes, replicated
    )


class _UnitRun:
    """One unit's simulation, its arrival probes and its working set per second."""

    def __init__(
        self,
        plan: RunPlan,
        policy: Policy,
        named: np.ndarray,
        limits: np.ndarray,
        unit: int | None,
        counts: _Counts,
        probes: list[Probe],
    ) -> None:
        self.plan, self.named, self.unit = plan, named, unit
        self.counts, self.probes, self.tiers = counts, probes, len(limits) + 1
        self.simulation: _Lru | _Gathered
        if policy == "lru":
            self.simulation = _Lru(limits, plan.spec.sample, 0 if unit is None else unit + 1)
        elif policy == "pin_prefix":
            self.simulation = _PinPrefix(limits, plan.pinned_items(unit), _rank_lookup(plan, unit))
        else:
            self.simulation = _Gathered(limits, policy)
        self.last_second = (
            np.full(plan.items, -1, dtype=np.int64) if counts.seconds is not None else None
        )
        probing = (
            plan.spec.scope == "run"
            and plan.spec.sharing == "content"
            and policy != "opt"
            and plan.spec.sample == 1
        )
        self.arrivals = (
            np.argsort(plan.arrival_slot, kind="stable") if probing else np.zeros(0, np.int64)
        )
        self.next_arrival = 0
        self.watched: dict[int, int] = {}
        self.reads: dict[int, np.ndarray] = {}
        self.replicated: dict[int, tuple[int, int]] = {}

    def watch(self, watched: dict[int, int], replicated: dict[int, tuple[int, int]]) -> None:
        """Count each item's reads from the tiers in ``watched`` (tier -> copies), to add
        the unit's replicated items and their reads to ``replicated``."""
        self.watched, self.replicated = watched, replicated
        self.reads = {tier: np.zeros(self.plan.items, dtype=np.int64) for tier in watched}
        if isinstance(self.simulation, _Lru):
            self.simulation.want_levels = bool(watched)

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
        levels = self.simulation.feed(items, first, slots, self.counts)
        if levels is not None:
            self._count_reads(items, levels)
        if self.last_second is not None:
            self.counts.working_set(items, slots, self.last_second)

    def _count_reads(self, items: np.ndarray, levels: np.ndarray) -> None:
        for tier, reads in self.reads.items():
            reads += np.bincount(items[levels == tier], minlength=len(reads))

    def finish(self) -> UnitOutcome:
        if isinstance(self.simulation, _Gathered):
            outcome, served = self.simulation.finish(self.named)
            if served is not None:
                items, slots, levels, shared = served
                self.counts.levels(slots, levels, shared)
                self._count_reads(items.astype(np.int64), levels)
        else:
            outcome = self.simulation.finish(self.named)
        for tier, reads in self.reads.items():
            hot = reads >= self.watched[tier]
            blocks, moved = self.replicated.get(tier, (0, 0))
            self.replicated[tier] = (blocks + int(hot.sum()), moved + int(reads[hot].sum()))
        return outcome


def _probe(plan: RunPlan, simulation: _Lru | _Gathered, request: int, tiers: int) -> Probe:
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
