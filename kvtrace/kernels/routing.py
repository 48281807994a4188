"""A fleet of prefix caches behind a router: per request, the worker it goes to, the
leading run of its blocks that worker had cached, and the worker's load when it arrived.

Requests come in arrival order as paths of the prefix tree (``nodes[starts[r]:starts[r +
1]]``, as `kvtrace.kernels.prefix_sim` numbers them); every worker keeps a cache of its
own of ``capacity`` blocks:

- ``POOL``: vLLM's hash-chained block pool under LRU: after the hit is counted every
  block of the request is touched in order, a miss inserted, and the least recently used
  block evicted when the pool is over capacity (what `leading_lru_distances` answers for
  one cache), kept as a list of slots in order of use (each step O(1));
- ``RADIX``: SGLang's radix tree under LRU, by the same steps and heap as
  `kvtrace.kernels.radix_cache` (the hit run refreshed, misses inserted under cached
  parents, only leaves off the request's cached path evicted).

A worker's load is its active requests: a request is active on its worker from its
arrival until ``ends[r]`` (both in seconds; one that ends as it arrives never is).  The
router (``FIXED``: the worker given per request; ``LEAST_LOADED``; ``PREFIX_SCORE`` and
``PREFIX_COST``: see `route`) breaks ties by the smaller load, then by the worker chosen
least recently, then by the lower index.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.typed import List

from kvtrace.kernels.prefix_sim import leading_run
from kvtrace.kernels.radix_cache import _evict, _order, _push, _room, _touch

__all__ = ["FIXED", "LEAST_LOADED", "POOL", "PREFIX_COST", "PREFIX_SCORE", "RADIX", "route"]

FIXED, LEAST_LOADED, PREFIX_SCORE, PREFIX_COST = 0, 1, 2, 3
POOL, RADIX = 0, 1


@njit(nogil=True, cache=True)
def _pool_request(  # pragma: no cover
    nodes: np.ndarray,
    start: int,
    end: int,
    capacity: int,
    slot_of: np.ndarray,
    node_at: np.ndarray,
    older: np.ndarray,
    newer: np.ndarray,
    ends: np.ndarray,
    size: int,
) -> int:
    """Touch a request's blocks in one worker's LRU pool, a list of slots from the most
    recently used (``ends[0]``) to the least (``ends[1]``; -1: empty): a cached block
    moves to the front, a miss takes a free slot or the least recently used one's.
    ``slot_of`` holds each node's slot plus one (0: not cached).  The pool's new size."""
    if capacity == 0:
        return 0
    for index in range(start, end):
        node = nodes[index]
        slot = slot_of[node] - 1
        if slot >= 0:
            if slot == ends[0]:
                continue
            before, after = older[slot], newer[slot]  # unlink (it is not the front)
            older[after] = before
            if before >= 0:
                newer[before] = after
            else:
                ends[1] = after
        elif size < capacity:
            slot = size
            size += 1
        else:
            slot = ends[1]  # the least recently used block leaves
            slot_of[node_at[slot]] = 0
            ends[1] = newer[slot]
            if ends[1] >= 0:
                older[ends[1]] = -1
            else:
                ends[0] = -1
        node_at[slot] = node
        slot_of[node] = slot + 1
        older[slot] = ends[0]  # to the front
        newer[slot] = -1
        if ends[0] >= 0:
            newer[ends[0]] = slot
        else:
            ends[1] = slot
        ends[0] = slot
    return size


@njit(nogil=True, cache=True)
def _radix_request(  # pragma: no cover
    nodes: np.ndarray,
    start: int,
    end: int,
    run: int,
    capacity: int,
    parent: np.ndarray,
    root: int,
    present: np.ndarray,
    state: np.ndarray,
    children: np.ndarray,
    heap: np.ndarray,
    heaped: int,
    size: int,
    clock: int,
    no_uses: np.ndarray,
) -> tuple[int, int, int]:
    """A request in one worker's radix tree, its hit ``run`` found: the steps of
    `kvtrace.kernels.radix_cache` under LRU (``no_uses``: OPT's next uses, empty);
    (heap size, tree size, clock)."""
    clock, heaped = _touch(nodes, start, run, clock, no_uses, False, state, children, heap, heaped)
    guard = nodes[start + run - 1] if run > 0 else root
    for index in range(start + run, end):
        node = nodes[index]
        evicted = size < capacity
        if not evicted:
            evicted, heaped = _evict(
                heap, heaped, guard, 0, present, children, state, parent, root, False
            )
            if evicted:
                size -= 1
        if not evicted or not present[parent[node]]:
            break
        present[node] = True
        size += 1
        children[parent[node]] += 1
        clock += 1
        state[node] = clock
        heaped = _push(heap, heaped, _order(clock, node, False))
    return heaped, size, clock


@njit(inline="always", cache=True)
def _better(  # pragma: no cover
    value: float, load: int, chosen_at: int, best: float, best_load: int, best_at: int
) -> bool:
    """Whether a worker beats the best so far: a larger value, then a smaller load, then
    chosen less recently (the scan goes by index, so an exact tie keeps the lower)."""
    if value != best:
        return value > best
    if load != best_load:
        return load < best_load
    return chosen_at < best_at


@njit(nogil=True, cache=True)
def _route(  # pragma: no cover
    nodes: np.ndarray,
    starts: np.ndarray,
    arrivals: np.ndarray,
    ends: np.ndarray,
    fixed: np.ndarray,
    policy: int,
    cache: int,
    workers: int,
    capacity: int,
    parent: np.ndarray,
    root: int,
    present: np.ndarray,
    state: np.ndarray,
    children: np.ndarray,
    slots: np.ndarray,
    threshold: float,
    overlap_weight: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``present`` per worker and node: the cached mark (radix tree) or the slot plus one
    (pool); ``state`` and ``children`` the tree's, ``slots`` the pools' (per worker: each
    slot's node, older and newer neighbour)."""
    requests = len(starts) - 1
    chosen = np.empty(requests, np.int64)
    hits = np.zeros(requests, np.int64)
    loads = np.zeros(requests, np.int64)
    active = np.zeros(workers, np.int64)  # requests running on each worker
    active_blocks = np.zeros(workers, np.int64)  # and their blocks
    chosen_at = np.full(workers, -1, np.int64)
    sizes = np.zeros(workers, np.int64)
    heaped = np.zeros(workers, np.int64)
    heaps = List()
    for _ in range(workers if cache == RADIX else 1):
        heaps.append(np.empty(1 << 10, np.int64))
    pool_ends = np.full((workers, 2), -1, np.int64)  # each pool's newest and oldest slot
    no_uses = np.zeros(0, np.int64)
    listed = np.zeros(present.shape[1] if cache == RADIX else 1, np.bool_)  # compaction's
    runs = np.zeros(workers, np.int64)
    by_end = np.argsort(ends, kind="mergesort")
    released = 0
    clock = 0
    for request in range(requests):
        now = arrivals[request]
        while released < requests and ends[by_end[released]] <= now:
            done = by_end[released]
            released += 1
            if ends[done] > arrivals[done]:  # it was active: it arrived before now
                active[chosen[done]] -= 1
                active_blocks[chosen[done]] -= starts[done + 1] - starts[done]
        start, end = starts[request], starts[request + 1]
        blocks = end - start
        if policy == FIXED:
            worker = fixed[request]
        else:
            worker = -1
            best = 0.0
            for w in range(workers):
                if policy == LEAST_LOADED:
                    value = 0.0
                else:
                    runs[w] = leading_run(nodes, start, end, present[w])
                    if policy == PREFIX_SCORE:  # llm-d: prefix and load-aware scorers
                        queued = min(float(active[w]), threshold)
                        value = runs[w] / max(blocks, 1) + 0.5 * (1.0 - queued / threshold)
                    else:  # Dynamo: -(weight x prefill blocks + decode blocks)
                        value = -(overlap_weight * (blocks - runs[w]) + active_blocks[w] + blocks)
                if worker < 0 or _better(
                    value, active[w], chosen_at[w], best, active[worker], chosen_at[worker]
                ):
                    worker, best = w, value
        chosen[request] = worker
        loads[request] = active[worker]
        chosen_at[worker] = request
        if ends[request] > now:
            active[worker] += 1
            active_blocks[worker] += blocks
        run = leading_run(nodes, start, end, present[worker])
        hits[request] = run
        if cache == POOL:
            sizes[worker] = _pool_request(
                nodes,
                start,
                end,
                capacity,
                present[worker],
                slots[worker, 0],
                slots[worker, 1],
                slots[worker, 2],
                pool_ends[worker],
                sizes[worker],
            )
            continue
        heap, heaped[worker] = _room(
            heaps[worker],
            heaped[worker],
            2 * blocks + 2,
            present[worker],
            children[worker],
            state[worker],
            False,
            listed,
        )
        heaps[worker] = heap
        heaped[worker], sizes[worker], clock = _radix_request(
            nodes,
            start,
            end,
            run,
            capacity,
            parent,
            root,
            present[worker],
            state[worker],
            children[worker],
            heap,
            heaped[worker],
            sizes[worker],
            clock,
            no_uses,
        )
    return chosen, hits, loads


def route(
    nodes: np.ndarray,
    starts: np.ndarray,
    arrivals: np.ndarray,
    ends: np.ndarray,
    fixed: np.ndarray,
    policy: int,
    cache: int,
    workers: int,
    capacity: int,
    tree: tuple[np.ndarray, int],
    threshold: float = 128.0,
    overlap_weight: float = 1.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per request: its worker, its leading blocks that worker had cached, and the
    worker's active requests when it arrived.

    ``tree`` is each node's parent and the root (`kvtrace.kernels.prefix_sim.chained_tree`
    or `radix_nodes`; the pool uses only the node count).  ``fixed`` holds the worker of
    each request under ``FIXED``.  ``PREFIX_SCORE`` (llm-d's prefix-cache scorer plus its
    load-aware scorer, weights 1 and 1) takes the largest
    ``hit / blocks + 0.5 x (1 - min(load, threshold) / threshold)``; ``PREFIX_COST``
    (Dynamo's KV router) the smallest ``overlap_weight x (blocks - hit) + active blocks +
    blocks``.  Memory per worker: under ``POOL`` a slot per node and three integers per
    slot of the capacity; under ``RADIX`` a cached mark, a last use and a count of cached
    children per node."""
    parent, root = tree
    count = len(parent)
    wide = np.int32 if count < 2**31 else np.int64
    if cache == RADIX:
        present = np.zeros((workers, count), np.bool_)
        present[:, root] = True
        state = np.zeros((workers, count), np.int32 if 2 * len(nodes) + 1 < 2**31 else np.int64)
        children = np.zeros((workers, count), wide)
        slots = np.zeros((1, 3, 1), wide)
    else:
        present = np.zeros((workers, count), wide)  # each node's slot plus one
        state = children = np.zeros((1, 1), wide)
        slots = np.zeros((workers, 3, min(capacity, count)), wide)
    found: tuple[np.ndarray, np.ndarray, np.ndarray] = _route(
        np.ascontiguousarray(nodes),
        np.ascontiguousarray(starts, np.int64),
        np.ascontiguousarray(arrivals, np.float64),
        np.ascontiguousarray(ends, np.float64),
        np.ascontiguousarray(fixed, np.int64),
        policy,
        cache,
        workers,
        capacity,
        np.ascontiguousarray(parent),
        root,
        present,
        state,
        children,
        slots,
        float(threshold),
        float(overlap_weight),
    )
    return found
