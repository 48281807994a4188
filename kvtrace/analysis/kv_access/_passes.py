"""The unit passes of the block what-if: one object per unit (a request, or a run for
scope ``run``) that a policy's `kvtrace.analysis.policies.BlockPass` names, fed the
unit's chunks in order and finished into its `UnitOutcome` (hits at every capacity of
the grid and at the named ones), counting each access's tier on the way.

- `LruPass`: LRU stack distances (`kvtrace.kernels.cache_sim.LruStack`), every capacity
  and the exclusive tier hierarchy from one pass; at a sample rate below 1, SHARDS-adj.
- `PinPrefixPass`: the unit's pinned prefix items always hit; LRU over the rest.
- `GatheredPass`: the stream gathered, then the policy's kernel run once per capacity;
  tiers live (`kvtrace.kernels.cache_sim.TierCache`, FIFO), or for a policy that knows
  the future, at the end from its masks at the cumulative capacities.
- `kvtrace.analysis.kv_access._priority.PriorityPass`: every capacity at once, for the
  policies that rank items by frequency, score or a window of recent tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from kvtrace.analysis.policies import CachePolicy
from kvtrace.kernels.access_items import distinct_per_bucket, first_touches
from kvtrace.kernels.cache_sim import LruStack, TierCache, dense_ids, tally_distances
from kvtrace.kernels.sampling import sampled

__all__ = [
    "Counts",
    "GatheredPass",
    "LruPass",
    "PinPrefixPass",
    "UnitOutcome",
    "UnitPass",
    "counts_below",
    "grid",
    "unit_pass",
]


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


def grid(span: int) -> np.ndarray:
    """Capacities 1, 2, 4, ... up to the first power of two >= ``span``."""
    return 2 ** np.arange(max(int(span) - 1, 0).bit_length() + 1, dtype=np.int64)


def counts_below(hist: np.ndarray, capacities: np.ndarray) -> np.ndarray:
    """For each capacity C: how many observations of ``hist`` (per value) are < C.

    The running sum is taken a piece of `_SUM_PIECE` values at a time: a shared pool's
    histogram has an entry per distinct item, and a whole copy of it would be the
    simulation's largest allocation."""
    bounds = np.clip(capacities, 0, len(hist))
    below = np.zeros(len(bounds), dtype=np.int64)
    total = 0
    for start in range(0, len(hist), _SUM_PIECE):
        running = np.cumsum(hist[start : start + _SUM_PIECE]) + total
        inside = (bounds > start) & (bounds <= start + len(running))
        below[inside] = running[bounds[inside] - start - 1]
        total = int(running[-1])
    return below


_SUM_PIECE = 1 << 20


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


class LruPass:
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
        self, items: np.ndarray, first: np.ndarray, slots: np.ndarray, counts: Counts
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
    """``hist`` extended with zeros to at least ``size`` (by a quarter at least)."""
    return np.concatenate([hist, np.zeros(max(size, len(hist) * 5 // 4) - len(hist), np.int64)])


class PinPrefixPass(LruPass):
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
        self, items: np.ndarray, first: np.ndarray, slots: np.ndarray, counts: Counts
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


class GatheredPass:
    """A policy with a kernel per capacity (FIFO, OPT): the unit's stream is gathered,
    then simulated once per capacity.  The tiers are simulated live as it comes (FIFO
    with demotion, `TierCache`), or at the end for a policy that knows the future."""

    def __init__(self, limits: np.ndarray, policy: CachePolicy) -> None:
        assert policy.capacity_kernel is not None, policy.name
        self.limits = limits
        self.knows_future = policy.knows_future
        self.simulate = policy.capacity_kernel
        self.items: list[np.ndarray] = []
        self.first: list[np.ndarray] = []
        self.slots: list[np.ndarray] = []
        self.tiers = TierCache(np.diff(limits, prepend=0).tolist(), lru=False)

    def feed(
        self, items: np.ndarray, first: np.ndarray, slots: np.ndarray, counts: Counts
    ) -> np.ndarray | None:
        narrow = np.int32 if len(items) == 0 or items.max() < 2**31 else np.int64
        self.items.append(items.astype(narrow))
        self.first.append(first)
        if self.knows_future:
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
        """The outcome, and for a policy that knows the future the (items, slots, levels,
        shared) of every access."""
        gathered = np.concatenate(self.items) if self.items else np.zeros(0, np.int64)
        ids, distinct = dense_ids(gathered)
        first = np.concatenate(self.first) if self.first else np.zeros(0, dtype=bool)
        accesses = len(ids)
        cold = np.zeros(accesses, dtype=bool)
        cold[np.unique(ids, return_index=True)[1]] = True
        masks: dict[int, np.ndarray] = {}

        def mask(capacity: int) -> np.ndarray:
            if capacity >= distinct:
                return ~cold
            if capacity not in masks:
                masks[capacity] = self.simulate(ids, distinct, capacity)
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
        if not self.knows_future:
            return outcome, None
        level = np.full(accesses, len(self.limits), dtype=np.int64)
        for index in range(len(self.limits) - 1, -1, -1):
            level[mask(int(self.limits[index]))] = index
        served = np.concatenate(self.slots) if self.slots else np.zeros(0, np.int64)
        return outcome, (gathered, served, level, first & ~cold)


@dataclass
class Counts:
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


UnitPass = LruPass | GatheredPass  # PinPrefixPass is an LruPass


def unit_pass(
    policy: CachePolicy,
    limits: np.ndarray,
    rate: float,
    salt: int,
    pinned: Callable[[], tuple[int, Callable[[np.ndarray], np.ndarray]]],
) -> UnitPass:
    """The pass ``policy`` runs a unit with: ``rate`` and ``salt`` sample an LRU pass,
    ``pinned`` gives a pinned pass its pinned item count and rank lookup."""
    if policy.block_pass == "stack_distance":
        return LruPass(limits, rate, salt)
    if policy.block_pass == "pinned_stack":
        return PinPrefixPass(limits, *pinned())
    if policy.block_pass == "per_capacity":
        return GatheredPass(limits, policy)
    raise ValueError(f"policy {policy.name} has no pass over a block stream")
