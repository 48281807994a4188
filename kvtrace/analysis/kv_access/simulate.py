"""Cache policies over the access stream: hit curves, reuse histograms, tier levels.

Each unit (a request, or a run for scope ``run``) is simulated on its own by a policy
object fed the unit's pieces in order.  A unit's outcome gives its hits at capacities
1, 2, 4, ... (and at any capacity the caller names); a run's curve sums its units.

Policies (capacities count items of the chosen granularity; a first touch is a miss):

- ``lru``: one stack-distance pass answers every capacity (hit iff distance < capacity).
- ``fifo``: simulated once per capacity.
- ``opt``: Belady's MIN, simulated once per capacity; no online policy hits more.
- ``pin_prefix``: the unit's cached prefix items (blocks of the prefix region of a
  prefix-cache hit, all layers of them at ``layer_block``) are resident from the start and
  never evicted; they take ``min(P, C)`` of the capacity (the lowest block ids first) and
  an access to a pinned item is a hit.  The other items share what is left under LRU.

When tiers are given (cumulative capacities, the last tier unbounded), every access is
served by the first tier whose cumulative capacity hits it, and each step's accesses are
counted per tier.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from kvtrace.analysis.kv_access import Policy
from kvtrace.analysis.kv_access.stream import Piece
from kvtrace.kernels.cache_sim import LruStack, dense_ids, fifo_hits, opt_hits


@dataclass
class UnitOutcome:
    """What one cache unit saw and hit."""

    run_id: str
    accesses: int
    distinct: int  # items touched
    first_touches: int
    span: int  # capacity from which on every access but the cold misses hits
    grid_hits: np.ndarray  # hits at capacity 2**k for k = 0, 1, ...; beyond: saturated_hits
    saturated_hits: int
    named_hits: np.ndarray  # hits at the named capacities
    distance_hist: np.ndarray | None = None  # LRU: accesses per stack distance
    step_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    step_tiers: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.int64))

    def hits_at_grid(self, length: int) -> np.ndarray:
        """Hits at capacities 2**0 .. 2**(length - 1)."""
        grid = self.grid_hits[:length]
        return np.concatenate([grid, np.full(length - len(grid), self.saturated_hits)])


def _grid(span: int) -> np.ndarray:
    """Capacities 1, 2, 4, ... up to the first power of two >= ``span``."""
    return 2 ** np.arange(max(int(span) - 1, 0).bit_length() + 1, dtype=np.int64)


def _counts_below(hist: np.ndarray, capacities: np.ndarray) -> np.ndarray:
    """For each capacity C: how many observations of ``hist`` (per value) are < C."""
    cumulative = np.concatenate(([0], np.cumsum(hist)))
    below: np.ndarray = cumulative[np.clip(capacities, 0, len(hist))]
    return below


class _StepCounter:
    """Accesses per (step, tier), accumulated over pieces."""

    def __init__(self, tiers: int) -> None:
        self.tiers = tiers
        self._parts: list[tuple[np.ndarray, np.ndarray]] = []

    def add(self, steps: np.ndarray, levels: np.ndarray) -> None:
        if self.tiers == 0 or len(steps) == 0:
            return
        unique, inverse = np.unique(steps, return_inverse=True)
        counts = np.bincount(inverse * self.tiers + levels, minlength=len(unique) * self.tiers)
        self._parts.append((unique, counts.reshape(len(unique), self.tiers)))

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        if not self._parts:
            return np.zeros(0, np.int64), np.zeros((0, self.tiers), np.int64)
        steps = np.concatenate([s for s, _ in self._parts])
        counts = np.concatenate([c for _, c in self._parts])
        unique, inverse = np.unique(steps, return_inverse=True)
        merged = np.zeros((len(unique), self.tiers), dtype=np.int64)
        np.add.at(merged, inverse, counts)
        return unique, merged


def _first_hit_level(hit_by_limit: list[np.ndarray], n: int) -> np.ndarray:
    """The first tier whose cumulative capacity hits each access; the last tier else."""
    level = np.full(n, len(hit_by_limit), dtype=np.int64)
    for index in range(len(hit_by_limit) - 1, -1, -1):
        level[hit_by_limit[index]] = index
    return level


class _Lru:
    """LRU over a unit fed piece by piece (nothing of the stream is kept)."""

    def __init__(
        self, run_id: str, named: np.ndarray, limits: np.ndarray, pinned_items: int = 0
    ) -> None:
        self.run_id, self.named, self.limits = run_id, named, limits
        self.stack = LruStack()
        self.hist = np.zeros(0, dtype=np.int64)
        self.accesses = self.cold = 0
        self.steps = _StepCounter(len(limits) + 1 if len(limits) else 0)

    def feed(self, piece: Piece) -> None:
        distances = self.stack.distances(piece.keys)
        self._count(distances)
        if len(self.limits):
            hits = [(distances >= 0) & (distances < limit) for limit in self.limits]
            self.steps.add(piece.steps, _first_hit_level(hits, len(distances)))

    def _count(self, distances: np.ndarray) -> None:
        self.accesses += len(distances)
        reused = distances[distances >= 0]
        self.cold += len(distances) - len(reused)
        counts = np.bincount(reused)
        if len(counts) > len(self.hist):
            self.hist = np.concatenate(
                [self.hist, np.zeros(len(counts) - len(self.hist), dtype=np.int64)]
            )
        self.hist[: len(counts)] += counts

    def finish(self) -> UnitOutcome:
        distinct = self.stack.distinct
        step_ids, step_tiers = self.steps.result()
        return UnitOutcome(
            self.run_id,
            self.accesses,
            distinct,
            self.cold,
            distinct,
            _counts_below(self.hist, _grid(distinct)),
            self.accesses - self.cold,
            _counts_below(self.hist, self.named),
            self.hist,
            step_ids,
            step_tiers,
        )


class _PinPrefix(_Lru):
    """Pinned prefix items always hit; the rest is LRU in the capacity left."""

    def __init__(
        self, run_id: str, named: np.ndarray, limits: np.ndarray, pinned_items: int = 0
    ) -> None:
        super().__init__(run_id, named, limits)
        self.pinned = pinned_items
        self.rank_hist = np.zeros(max(pinned_items, 1), dtype=np.int64)

    def feed(self, piece: Piece) -> None:
        is_pinned = piece.pinned_rank >= 0
        ranks = piece.pinned_rank[is_pinned]
        self.rank_hist += np.bincount(ranks, minlength=len(self.rank_hist))
        distances = self.stack.distances(piece.keys[~is_pinned])
        self._count(distances)
        self.accesses += len(ranks)
        if len(self.limits):
            full = np.full(len(piece.keys), -1, dtype=np.int64)
            full[~is_pinned] = distances
            rank = piece.pinned_rank
            hits = [
                np.where(
                    is_pinned,
                    rank < min(limit, self.pinned),
                    (full >= 0) & (full < limit - self.pinned),
                )
                for limit in self.limits
            ]
            self.steps.add(piece.steps, _first_hit_level(hits, len(rank)))

    def _hits(self, capacities: np.ndarray) -> np.ndarray:
        pinned_total = int(self.rank_hist.sum())
        rest = _counts_below(self.hist, np.maximum(capacities - self.pinned, 0))
        return np.where(
            capacities >= self.pinned,
            pinned_total + rest,
            _counts_below(self.rank_hist, capacities),
        )

    def finish(self) -> UnitOutcome:
        span = self.pinned + self.stack.distinct
        step_ids, step_tiers = self.steps.result()
        return UnitOutcome(
            self.run_id,
            self.accesses,
            self.stack.distinct + int((self.rank_hist > 0).sum()),
            self.cold,
            span,
            self._hits(_grid(span)),
            self.accesses - self.cold,
            self._hits(self.named),
            None,
            step_ids,
            step_tiers,
        )


class _Simulated:
    """FIFO or OPT: the unit's stream is gathered, then simulated once per capacity."""

    def __init__(
        self,
        run_id: str,
        named: np.ndarray,
        limits: np.ndarray,
        policy: Policy,
        pinned_items: int = 0,
    ) -> None:
        self.run_id, self.named, self.limits = run_id, named, limits
        self.simulate = fifo_hits if policy == "fifo" else opt_hits
        self.keys: list[np.ndarray] = []
        self.steps: list[np.ndarray] = []

    def feed(self, piece: Piece) -> None:
        self.keys.append(piece.keys)
        self.steps.append(piece.steps)

    def finish(self) -> UnitOutcome:
        ids, distinct = dense_ids(np.concatenate(self.keys))
        accesses = len(ids)
        saturated = accesses - distinct
        cache: dict[int, np.ndarray] = {}

        def hit_mask(capacity: int) -> np.ndarray:
            if capacity >= distinct:  # everything fits: only first touches miss
                first = np.zeros(accesses, dtype=bool)
                first[np.unique(ids, return_index=True)[1]] = True
                return ~first
            if capacity not in cache:
                cache[capacity] = self.simulate(ids, distinct, capacity)
            return cache[capacity]

        def hits(capacities: Iterable[int]) -> np.ndarray:
            return np.array(
                [saturated if c >= distinct else int(hit_mask(int(c)).sum()) for c in capacities],
                dtype=np.int64,
            )

        counter = _StepCounter(len(self.limits) + 1 if len(self.limits) else 0)
        if len(self.limits):
            masks = [hit_mask(int(min(limit, distinct))) for limit in self.limits]
            counter.add(np.concatenate(self.steps), _first_hit_level(masks, accesses))
        step_ids, step_tiers = counter.result()
        return UnitOutcome(
            self.run_id,
            accesses,
            distinct,
            distinct,
            distinct,
            hits(_grid(distinct)),
            saturated,
            hits(self.named),
            None,
            step_ids,
            step_tiers,
        )


def simulate_units(
    pieces: Iterator[Piece],
    policy: Policy,
    named: np.ndarray,
    limits: np.ndarray,
    pinned_items: Callable[[str, int | None], int],
) -> Iterator[UnitOutcome]:
    """Run ``policy`` over each unit of ``pieces``.

    ``pinned_items(run_id, request_id)`` gives a unit's pinned prefix items (pin_prefix);
    ``limits`` are the cumulative capacities of every tier but the last (may be empty).
    """
    current: _Lru | _Simulated | None = None
    key = None
    for piece in pieces:
        unit = (piece.run_id, piece.request_id)
        if unit != key:
            if current is not None:
                yield current.finish()
            key = unit
            pinned = pinned_items(*unit) if policy == "pin_prefix" else 0
            if policy == "lru":
                current = _Lru(piece.run_id, named, limits)
            elif policy == "pin_prefix":
                current = _PinPrefix(piece.run_id, named, limits, pinned)
            else:
                current = _Simulated(piece.run_id, named, limits, policy)
        assert current is not None
        current.feed(piece)
    if current is not None:
        yield current.finish()
