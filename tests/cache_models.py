"""Brute-force cache simulations, written plainly, that the fast kernels are checked against."""

from __future__ import annotations

from collections import OrderedDict, deque


def lru_hits(stream: list, capacity: int) -> list[bool]:
    cache: OrderedDict = OrderedDict()
    hits = []
    for item in stream:
        if item in cache:
            cache.move_to_end(item)
            hits.append(True)
            continue
        hits.append(False)
        cache[item] = True
        if len(cache) > capacity:
            cache.popitem(last=False)
    return hits


def fifo_hits(stream: list, capacity: int) -> list[bool]:
    cache: set = set()
    order: deque = deque()
    hits = []
    for item in stream:
        if item in cache:
            hits.append(True)
            continue
        hits.append(False)
        if len(cache) == capacity:
            cache.discard(order.popleft())
        cache.add(item)
        order.append(item)
    return hits


def opt_hits(stream: list, capacity: int) -> list[bool]:
    cache: set = set()
    hits = []
    for i, item in enumerate(stream):
        if item in cache:
            hits.append(True)
            continue
        hits.append(False)
        if len(cache) == capacity:

            def next_use(other, start=i):
                for j in range(start + 1, len(stream)):
                    if stream[j] == other:
                        return j
                return len(stream) + 1

            cache.remove(max(cache, key=next_use))
        cache.add(item)
    return hits


def stack_distance(stream: list) -> list[int]:
    """Distinct other items since each item's last access; -1 for a first access."""
    out = []
    for i, item in enumerate(stream):
        previous = max((j for j in range(i) if stream[j] == item), default=None)
        out.append(-1 if previous is None else len(set(stream[previous + 1 : i])))
    return out


def tiered_levels(stream: list, capacities: list[int], policy: str) -> list[int]:
    """The tier serving each access of an exclusive hierarchy: tiers 0..T-1 hold at most
    ``capacities[k]`` items each (a list, oldest first), tier T everything else.  A miss
    of every bounded tier (tier T) and a hit in a lower tier both put the item on top of
    tier 0; a tier over capacity moves its oldest item to the top of the next tier, and
    the last bounded tier drops it.  Under LRU a hit in tier 0 makes the item newest."""
    tiers: list[list] = [[] for _ in capacities]
    levels = []
    for item in stream:
        where = next((k for k, tier in enumerate(tiers) if item in tier), len(tiers))
        levels.append(where)
        if where == 0 and policy == "fifo":
            continue
        if where < len(tiers):
            tiers[where].remove(item)
        tiers[0].append(item) if tiers else None
        for k, tier in enumerate(tiers):
            if len(tier) > capacities[k]:
                oldest = tier.pop(0)
                if k + 1 < len(tiers):
                    tiers[k + 1].append(oldest)
    return levels


def evicting(stream: list, capacity: int, rank) -> list[bool]:
    """A demand cache of ``capacity`` items that, full, evicts the cached item of lowest
    ``rank(item, time)`` evaluated at the miss; ``rank`` sees the accesses before it."""
    cache: set = set()
    hits = []
    for time, item in enumerate(stream):
        if item in cache:
            hits.append(True)
            continue
        hits.append(False)
        if capacity == 0:
            continue
        if len(cache) == capacity:
            cache.remove(min(cache, key=lambda other: rank(other, time)))
        cache.add(item)
    return hits
