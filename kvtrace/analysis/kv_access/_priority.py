"""The block what-if's ``priority`` pass: a unit's stream served by caches of every
capacity at once (`kvtrace.kernels.priority_sim`), for the policies that rank items by
frequency, score or a sliding window of recent tokens.

The capacities are the grid's (1, 2, 4, ... up to the unit's possible items), the named
ones and the tiers' cumulative ones.  The caches nest (a smaller one holds a subset of a
larger one), so an access is served by the first tier whose cumulative capacity holds
its item: the exclusive hierarchy in which each tier demotes its lowest item to the next.
Nothing of the stream is kept: the state is a few numbers per item and the caches' heaps.
"""

from __future__ import annotations

import numpy as np

from kvtrace.analysis.kv_access._passes import Counts, UnitOutcome, grid
from kvtrace.analysis.kv_access.plan import RunPlan
from kvtrace.analysis.policies import CachePolicy
from kvtrace.kernels.priority_sim import (
    MODE_FREQUENCY,
    MODE_SCORE,
    MODE_WINDOW,
    PriorityCaches,
)

__all__ = ["PriorityPass"]

_MODES = {"frequency": MODE_FREQUENCY, "score": MODE_SCORE, "window": MODE_WINDOW}


class PriorityPass:
    """A unit simulated by its policy's priority at every capacity."""

    def __init__(
        self,
        limits: np.ndarray,
        named: np.ndarray,
        policy: CachePolicy,
        plan: RunPlan,
        window_tokens: int,
    ) -> None:
        assert policy.priority is not None, policy.name
        self.limits = limits
        self.capacities = np.unique(np.concatenate([grid(plan.items), named, limits]))
        mode = _MODES[policy.priority]
        windows = plan.windows(window_tokens) if mode == MODE_WINDOW else None
        self.caches = PriorityCaches(plan.items, self.capacities, mode, windows)
        # the tier of each capacity index (the last: none of the bounded tiers)
        self.tier_of = np.searchsorted(
            np.searchsorted(self.capacities, limits), np.arange(len(self.capacities) + 1)
        )
        self.hist = np.zeros(len(self.capacities) + 1, dtype=np.int64)
        self.shared_hist = np.zeros(len(self.capacities) + 1, dtype=np.int64)
        self.accesses = 0

    def feed(
        self,
        items: np.ndarray,
        first: np.ndarray,
        slots: np.ndarray,
        counts: Counts,
        steps: np.ndarray | None = None,
        scores: np.ndarray | None = None,
    ) -> np.ndarray:
        """Serve the accesses; their tiers (``steps`` for a window, ``scores`` for the
        score policy)."""
        found = self.caches.access(items, scores, steps, slots)
        cached = found >= 0
        self.accesses += len(items)
        size = len(self.hist)
        self.hist += np.bincount(found[cached], minlength=size)
        self.shared_hist += np.bincount(found[cached & first], minlength=size)
        levels = self._tiers(found)
        counts.levels(slots, levels, first & cached)
        return levels

    def _tiers(self, found: np.ndarray) -> np.ndarray:
        tiers: np.ndarray = np.where(
            found >= 0, self.tier_of[np.maximum(found, 0)], len(self.limits)
        )
        return tiers

    def peek(self, items: np.ndarray) -> np.ndarray:
        """The tier each item would be served from now (the last: not cached)."""
        return self._tiers(self.caches.peek(items))

    def finish(self, named: np.ndarray) -> UnitOutcome:
        distinct = self.caches.distinct
        hits, shared = np.cumsum(self.hist), np.cumsum(self.shared_hist)
        at_grid = np.searchsorted(self.capacities, grid(distinct))
        at_named = np.searchsorted(self.capacities, named)
        return UnitOutcome(
            self.accesses,
            distinct,
            distinct,
            distinct,
            hits[at_grid],
            shared[at_grid],
            (self.accesses - distinct, int(self.shared_hist.sum())),
            hits[at_named],
            shared[at_named],
        )
