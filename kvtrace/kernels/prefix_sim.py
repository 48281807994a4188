"""Prefix caches as serving engines run them: per request, the leading run of its blocks
found in the cache.

A trace is requests in arrival order, each a list of block ids (``ids`` flattened,
request r holding ``ids[starts[r]:starts[r + 1]]``, dense ids 0 .. n - 1).  Every
function returns, per request, how many of its leading blocks were cached when it
arrived (the hit), for one capacity in blocks:

- `leading_lru_distances` and `fifo_prefix_hits` (vLLM's block pool: a block is named
  by the hash of everything up to its end): after the hit is counted, every block of
  the request is touched in order, a hit refreshed, a miss inserted; LRU evicts the
  least recently used block (every capacity from one pass), FIFO the oldest inserted
  one (a hit is not refreshed).
- `radix_hits` (SGLang's radix tree): blocks are nodes of the tree of prefixes; only
  the leading hits are refreshed, a miss is inserted only under a cached parent, and only
  a leaf outside the current request's cached path is evicted (``radix_lru``: the least
  recently used; ``opt``: the one needed again last), so a child is never cached
  without its parent.  When nothing can be evicted the request stops inserting.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvtrace.kernels.cache_sim import ItemIds, LruStack

NEVER = np.iinfo(np.int64).max  # the distance of a read no cache serves, however large
_PIECE = 1 << 20  # reads per piece fed to the LRU stack


def _narrowest(count: int) -> type[np.signedinteger]:
    """The integer type of an array numbering up to ``count`` things."""
    return np.int32 if count < 2**31 else np.int64


@njit(nogil=True, cache=True)
def _leading_run(  # pragma: no cover
    ids: np.ndarray, start: int, end: int, present: np.ndarray
) -> int:
    run = 0
    for index in range(start, end):
        if not present[ids[index]]:
            break
        run += 1
    return run


@njit(nogil=True, cache=True)
def _leading_distances(  # pragma: no cover
    ids: np.ndarray, starts: np.ndarray, distances: np.ndarray, n_items: int, never: int
) -> None:
    """Turn each read's LRU distance into the largest distance, as the request arrived,
    of the blocks up to it in its request (``never`` when one of them was not cached at
    all), in place."""
    previous = np.full(n_items, -1, dtype=np.int64)
    longest = 0
    for request in range(len(starts) - 1):
        longest = max(longest, starts[request + 1] - starts[request])
    before = np.empty(longest, dtype=np.int64)  # each read's item's last read before
    for request in range(len(starts) - 1):
        start, end = starts[request], starts[request + 1]
        for j in range(start, end):
            before[j - start] = previous[ids[j]]
        largest = -1
        for j in range(start, end):
            last = before[j - start]
            if last < 0:
                largest = never
            elif largest < never:
                # the blocks read before it in this request with an older (or no) last
                # read were not between it and its last read when the request arrived
                newer = 0
                for i in range(start, j):
                    if before[i - start] < last:
                        newer += 1
                largest = max(largest, distances[j] - newer)
            distances[j] = largest
        for j in range(start, end):
            previous[ids[j]] = j


def lru_distances(ids: np.ndarray) -> np.ndarray:
    """`LruStack` distances of dense ``ids`` (any integer dtype), fed in pieces so that no
    int64 copy of the whole stream is made."""
    stack = LruStack()
    out = np.empty(len(ids), dtype=np.int64)
    for start in range(0, len(ids), _PIECE):
        out[start : start + _PIECE] = stack.distances(ids[start : start + _PIECE])
    return out


def leading_lru_distances(ids: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """For a hash-chained LRU pool (every block of a request touched after its hit is
    counted): per block read, the smallest capacity minus one that serves it and every
    block before it in its request when the request arrives, so that a request's hit at
    capacity C is its reads with a value below C.  A read that no capacity serves (it or
    a block before it in its request was never read before) gets `NEVER`, which no
    capacity exceeds.

    One stack-distance pass answers every capacity: a block's distance as the request
    arrived is its distance when read less the blocks read before it in the request
    whose previous read was older than its own."""
    ids = np.ascontiguousarray(ids)
    distances = lru_distances(ids)
    n_items = int(ids.max()) + 1 if len(ids) else 0
    _leading_distances(ids, np.ascontiguousarray(starts, np.int64), distances, n_items, NEVER)
    return distances


@njit(nogil=True, cache=True)
def _hash_chain_fifo(  # pragma: no cover
    ids: np.ndarray, starts: np.ndarray, n_items: int, capacity: int
) -> np.ndarray:
    room = min(capacity, n_items) + 2  # a ring: the pool holds at most capacity + 1
    queue = np.empty(room, dtype=np.int64)
    first = last = 0
    present = np.zeros(n_items, dtype=np.bool_)
    hits = np.zeros(len(starts) - 1, dtype=np.int64)
    for request in range(len(starts) - 1):
        start, end = starts[request], starts[request + 1]
        hits[request] = _leading_run(ids, start, end, present)
        for index in range(start, end):
            item = ids[index]
            if present[item]:
                continue
            present[item] = True
            queue[last % room] = item
            last += 1
            if last - first > capacity:
                present[queue[first % room]] = False
                first += 1
    return hits


def fifo_prefix_hits(
    ids: np.ndarray, starts: np.ndarray, n_items: int, capacity: int
) -> np.ndarray:
    """Per request, its leading blocks cached on arrival in a FIFO pool of ``capacity``
    blocks (see the module docstring)."""
    return _hash_chain_fifo(
        np.ascontiguousarray(ids),
        np.ascontiguousarray(starts, np.int64),
        n_items,
        capacity,
    )


@njit(nogil=True, cache=True)
def _chained(ids: np.ndarray, starts: np.ndarray, n_items: int) -> bool:  # pragma: no cover
    parent_of = np.full(n_items, -2, dtype=np.int64)  # -2: not seen; -1: a request's first
    for request in range(len(starts) - 1):
        parent = -1
        for index in range(starts[request], starts[request + 1]):
            item = ids[index]
            if parent_of[item] == -2:
                parent_of[item] = parent
            elif parent_of[item] != parent:
                return False
            parent = item
    return True


def chained(ids: np.ndarray, starts: np.ndarray, n_items: int) -> bool:
    """Whether every block id of the trace (dense, below ``n_items``) always follows the
    same id in its request (or always starts one): then an id names one path of the
    prefix tree, and the ids can stand for `radix_nodes` without building them."""
    return bool(
        _chained(np.ascontiguousarray(ids), np.ascontiguousarray(starts, np.int64), n_items)
    )


def radix_nodes(ids: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The node of the prefix tree each block of each request is (1, 2, ...; 0 is the
    root), and each node's parent: requests share a node when they share every block up
    to it."""
    lengths = np.diff(starts)
    nodes = np.zeros(len(ids), dtype=_narrowest(len(ids)))
    parent = np.zeros(1, dtype=np.int64)
    numbering = ItemIds()
    above = np.zeros(len(lengths), dtype=np.int64)  # each request's node at the last depth
    for depth in range(int(lengths.max(initial=0))):
        deep = np.flatnonzero(lengths > depth)
        at = starts[deep] + depth
        numbered = numbering.ids((above[deep] << np.int64(31)) | ids[at].astype(np.int64)) + 1
        if numbering.count + 1 > len(parent):
            parent = np.concatenate([parent, np.zeros(numbering.count + 1 - len(parent), np.int64)])
        parent[numbered] = above[deep]
        nodes[at] = numbered
        above[deep] = numbered
    return nodes, parent


_LOW = (1 << 32) - 1  # a heap key's low half: the node, counted down


@njit(inline="always", cache=True)
def _order(key: int, node: int, optimal: bool) -> int:  # pragma: no cover
    """A leaf's place in the eviction heap (smallest first): LRU by last use, OPT by
    the latest next use; ties go to the node numbered last.  The low 32 bits hold the
    node, so the heap keeps keys alone (`_node_of`)."""
    rank = (np.int64(1) << 31) - key if optimal else key
    return int((rank << 32) | (_LOW - node))


@njit(inline="always", cache=True)
def _node_of(order: int) -> int:  # pragma: no cover
    """The node of a heap key of `_order`."""
    return _LOW - (order & _LOW)


@njit(inline="always", cache=True)
def _push(heap: np.ndarray, size: int, key: int) -> int:  # pragma: no cover
    """Push ``key`` onto the min-heap of ``size`` keys; the new size."""
    at = size
    while at > 0:
        up = (at - 1) >> 1
        if heap[up] <= key:
            break
        heap[at] = heap[up]
        at = up
    heap[at] = key
    return size + 1


@njit(inline="always", cache=True)
def _pop(heap: np.ndarray, size: int) -> tuple[int, int]:  # pragma: no cover
    """Pop the smallest key: (key, new size)."""
    top = heap[0]
    size -= 1
    key = heap[size]
    at = 0
    while True:
        low = 2 * at + 1
        if low >= size:
            break
        if low + 1 < size and heap[low + 1] < heap[low]:
            low += 1
        if key <= heap[low]:
            break
        heap[at] = heap[low]
        at = low
    if size > 0:
        heap[at] = key
    return top, size


@njit(nogil=True, cache=True)
def _radix(  # pragma: no cover
    nodes: np.ndarray,
    starts: np.ndarray,
    parent: np.ndarray,
    capacity: int,
    next_use: np.ndarray,
    optimal: bool,
    children: np.ndarray,
    guarded: np.ndarray,
) -> np.ndarray:
    """``children`` (each node's cached children) and ``guarded`` (the request whose
    cached path holds the node) come zeroed, of the narrowest type that counts them."""
    n = len(parent)
    present = np.zeros(n, dtype=np.bool_)
    present[0] = True
    state = np.zeros(n, dtype=np.int64)  # LRU: last use; OPT: the next request using it
    longest = 0
    for request in range(len(starts) - 1):
        longest = max(longest, starts[request + 1] - starts[request])
    # a request adds at most two entries a block; compacted, the heap holds each cached
    # leaf once, so room for twice the cached leaves compacts rarely
    leaves = min(capacity, n) + 1
    room = 2 * leaves + 4 * longest + 16
    listed = np.zeros(n, dtype=np.bool_)  # compaction: the leaves kept so far
    heap = np.empty(room, dtype=np.int64)  # keys of `_order`, stale ones skipped
    held = np.empty(room, dtype=np.int64)
    heaped = 0
    clock = 0
    size = 0
    hits = np.zeros(len(starts) - 1, dtype=np.int64)
    for request in range(len(starts) - 1):
        start, end = starts[request], starts[request + 1]
        run = _leading_run(nodes, start, end, present)
        hits[request] = run
        for index in range(start, start + run):
            node = nodes[index]
            clock += 1
            state[node] = next_use[index] if optimal else clock
            if children[node] == 0:
                heaped = _push(heap, heaped, _order(state[node], node, optimal))
        for index in range(start, end):  # the path as cached now (as SGLang locks it)
            if present[nodes[index]]:
                guarded[nodes[index]] = request + 1
        for index in range(start + run, end):
            node = nodes[index]
            if present[node]:
                continue
            if size >= capacity:  # evict a leaf off this request's path
                skipped = 0
                evicted = False
                while heaped > 0:
                    order, heaped = _pop(heap, heaped)
                    victim = _node_of(order)
                    if (
                        not present[victim]
                        or children[victim] != 0
                        or _order(state[victim], victim, optimal) != order
                    ):
                        continue
                    if guarded[victim] == request + 1:
                        held[skipped] = order
                        skipped += 1
                        continue
                    if optimal and state[victim] <= next_use[index]:
                        heaped = _push(heap, heaped, order)
                        break  # every leaf is needed sooner than this block
                    present[victim] = False
                    size -= 1
                    up = parent[victim]
                    children[up] -= 1
                    if up > 0 and present[up] and children[up] == 0:
                        heaped = _push(heap, heaped, _order(state[up], up, optimal))
                    evicted = True
                    break
                for k in range(skipped):
                    heaped = _push(heap, heaped, held[k])
                if not evicted:
                    break
            if size >= capacity or not present[parent[node]]:
                break
            present[node] = True
            size += 1
            children[parent[node]] += 1
            clock += 1
            state[node] = next_use[index] if optimal else clock
            heaped = _push(heap, heaped, _order(state[node], node, optimal))
        if heaped > 2 * leaves:  # drop stale and repeated entries before the heap fills
            kept = 0
            for k in range(heaped):
                order = heap[k]
                item = _node_of(order)
                if (
                    present[item]
                    and children[item] == 0
                    and not listed[item]
                    and _order(state[item], item, optimal) == order
                ):
                    listed[item] = True
                    held[kept] = order
                    kept += 1
            for k in range(kept):
                listed[_node_of(held[k])] = False
            heaped = 0
            for k in range(kept):
                heaped = _push(heap, heaped, held[k])
    return hits


@njit(nogil=True, cache=True)
def _next_uses(  # pragma: no cover
    nodes: np.ndarray, starts: np.ndarray, n: int, out: np.ndarray
) -> np.ndarray:
    never = len(starts)  # one past the last request
    last = np.full(n, never, dtype=np.int64)
    for request in range(len(starts) - 2, -1, -1):
        for index in range(starts[request], starts[request + 1]):
            out[index] = last[nodes[index]]
        for index in range(starts[request], starts[request + 1]):
            last[nodes[index]] = request
    return out


def radix_hits(
    nodes: np.ndarray, starts: np.ndarray, parent: np.ndarray, capacity: int, *, optimal: bool
) -> np.ndarray:
    """Per request, its leading blocks cached on arrival in a radix tree of ``capacity``
    blocks (`radix_nodes` gives ``nodes`` and ``parent``): the least recently used leaf is
    evicted, or with ``optimal`` the leaf used again last, and a block needed later than
    every cached leaf is not inserted (Belady over the tree's leaves)."""
    nodes = np.ascontiguousarray(nodes)
    starts = np.ascontiguousarray(starts, np.int64)
    next_use = np.zeros(len(nodes) if optimal else 0, _narrowest(len(starts)))
    if optimal:
        _next_uses(nodes, starts, len(parent), next_use)
    return _radix(
        nodes,
        starts,
        np.ascontiguousarray(parent, np.int64),
        capacity,
        next_use,
        optimal,
        np.zeros(len(parent), _narrowest(len(parent))),
        np.zeros(len(parent), _narrowest(len(starts))),
    )


@njit(nogil=True, cache=True)
def _leading_reads(runs: np.ndarray, starts: np.ndarray) -> np.ndarray:  # pragma: no cover
    out = np.empty(starts[-1], dtype=np.bool_)
    for request in range(len(starts) - 1):
        start = starts[request]
        for index in range(start, starts[request + 1]):
            out[index] = index - start < runs[request]
    return out


def leading_reads(runs: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per block read: whether it lies in its request's leading ``runs[r]`` blocks."""
    found: np.ndarray = _leading_reads(
        np.ascontiguousarray(runs, np.int64), np.ascontiguousarray(starts, np.int64)
    )
    return found


@njit(nogil=True, cache=True)
def _block_tokens(  # pragma: no cover
    starts: np.ndarray, inputs: np.ndarray, block_tokens: int
) -> np.ndarray:
    out = np.empty(starts[-1], dtype=np.int32)
    for request in range(len(starts) - 1):
        start = starts[request]
        for index in range(start, starts[request + 1]):
            left = inputs[request] - (index - start) * block_tokens
            out[index] = min(max(left, 0), block_tokens)
    return out


def block_tokens(starts: np.ndarray, inputs: np.ndarray, block_size: int) -> np.ndarray:
    """Per block read: its tokens, ``block_size`` but for what is left of the request's
    ``inputs`` tokens in its last blocks (none past the input)."""
    found: np.ndarray = _block_tokens(
        np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(inputs, np.int64), block_size
    )
    return found


@njit(nogil=True, cache=True)
def _weight(  # pragma: no cover
    index: int, tokens: np.ndarray, starts: np.ndarray, shares: np.ndarray
) -> float:
    request = np.searchsorted(starts, index, side="right") - 1
    weight: float = tokens[index] * shares[request]
    return weight


@njit(nogil=True, cache=True)
def _distance_sums(  # pragma: no cover
    distances: np.ndarray,
    starts: np.ndarray,
    tokens: np.ndarray,
    shares: np.ndarray,
    first: int,
    capacities: np.ndarray,
    order: np.ndarray,
    out: np.ndarray,
    weighted: np.ndarray,
) -> None:
    limit = capacities[-1]  # no read this far or farther counts anywhere
    counts = np.zeros(min(limit, len(distances)) + 1, dtype=np.int64)
    for index in range(first, len(distances)):
        distance = distances[index]
        if 0 <= distance < limit:
            counts[distance + 1] += 1
    for distance in range(1, len(counts)):
        counts[distance] += counts[distance - 1]
    for index in range(first, len(distances)):  # by distance, then by read
        distance = distances[index]
        if 0 <= distance < limit:
            order[counts[distance]] = index
            counts[distance] += 1
    hits = hit_tokens = 0
    summed = 0.0
    at = 0
    for k in range(counts[-1]):
        index = order[k]
        while capacities[at] <= distances[index]:
            out[at, 0], out[at, 1], weighted[at] = hits, hit_tokens, summed
            at += 1
        hits += 1
        hit_tokens += tokens[index]
        if len(shares):
            summed += _weight(index, tokens, starts, shares)
    for rest in range(at, len(capacities)):
        out[rest, 0], out[rest, 1], weighted[rest] = hits, hit_tokens, summed


def distance_sums(
    distances: np.ndarray,
    starts: np.ndarray,
    tokens: np.ndarray,
    shares: np.ndarray,
    first: int,
    capacities: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Per capacity (ascending): the reads from ``first`` on whose distance is below it,
    as hit blocks and hit tokens, and (with ``shares``, each request's weight per token)
    their weights summed in order of distance, then of read."""
    order = np.empty(len(distances) - first, dtype=_narrowest(len(distances)))
    counted = np.zeros((len(capacities), 2), dtype=np.int64)
    weighted = np.zeros(len(capacities), dtype=np.float64)
    if len(capacities):
        _distance_sums(
            distances,
            np.ascontiguousarray(starts, np.int64),
            tokens,
            shares,
            first,
            np.ascontiguousarray(capacities, np.int64),
            order,
            counted,
            weighted,
        )
    return counted, weighted


@njit(nogil=True, cache=True)
def _hit_sums(
    hit: np.ndarray, tokens: np.ndarray, first: int
) -> tuple[int, int]:  # pragma: no cover
    hits = hit_tokens = 0
    for index in range(first, len(hit)):
        if hit[index]:
            hits += 1
            hit_tokens += tokens[index]
    return hits, hit_tokens


def hit_sums(hit: np.ndarray, tokens: np.ndarray, first: int) -> tuple[int, int]:
    """The hit reads from ``first`` on and their tokens."""
    hits, hit_tokens = _hit_sums(hit, tokens, first)
    return int(hits), int(hit_tokens)


@njit(nogil=True, cache=True)
def _hit_weights(  # pragma: no cover
    hit: np.ndarray, tokens: np.ndarray, starts: np.ndarray, shares: np.ndarray, first: int
) -> np.ndarray:
    out = np.zeros(np.count_nonzero(hit), dtype=np.float64)
    at = 0
    for request in range(len(starts) - 1):
        for index in range(starts[request], starts[request + 1]):
            if hit[index]:
                if index >= first:
                    out[at] = tokens[index] * shares[request]
                at += 1
    return out


def hit_weights(
    hit: np.ndarray, tokens: np.ndarray, starts: np.ndarray, shares: np.ndarray, first: int
) -> np.ndarray:
    """Each hit read's weight, in read order: its tokens times its request's share (zero
    before ``first``)."""
    found: np.ndarray = _hit_weights(
        hit, tokens, np.ascontiguousarray(starts, np.int64), shares, first
    )
    return found


@njit(nogil=True, cache=True)
def _first_seen_order(  # pragma: no cover
    raw: np.ndarray, starts: np.ndarray, order: np.ndarray, renamed: np.ndarray, out: np.ndarray
) -> None:
    named = 0
    at = 0
    for request in order:
        for index in range(starts[request], starts[request + 1]):
            item = raw[index]
            if renamed[item] < 0:
                renamed[item] = named
                named += 1
            out[at] = renamed[item]
            at += 1


def first_seen_order(
    raw: np.ndarray, starts: np.ndarray, order: np.ndarray, distinct: int
) -> np.ndarray:
    """The reads of requests ``order[0], order[1], ...`` (request r holding
    ``raw[starts[r]:starts[r + 1]]``, dense ids below ``distinct``), with the ids numbered
    anew in order of first appearance (in ``raw``'s integer type)."""
    out = np.empty(len(raw), dtype=raw.dtype)
    _first_seen_order(
        raw,
        np.ascontiguousarray(starts, np.int64),
        np.ascontiguousarray(order, np.int64),
        np.full(distinct, -1, dtype=raw.dtype),
        out,
    )
    return out
