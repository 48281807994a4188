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
- SGLang's radix tree (`kvtrace.kernels.radix_cache`) runs over the tree of prefixes
  that `radix_nodes` builds, or that `chained_tree` finds in the ids themselves.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvtrace.kernels.cache_sim import ItemIds, LruStack

_PIECE = 1 << 20  # reads per piece fed to the LRU stack


def narrowest(count: int) -> type[np.signedinteger]:
    """The integer type of an array numbering up to ``count`` things."""
    return np.int32 if count < 2**31 else np.int64


@njit(nogil=True, cache=True)
def leading_run(  # pragma: no cover
    ids: np.ndarray, start: int, end: int, present: np.ndarray
) -> int:
    """How many of ``ids[start:end]`` are ``present`` before the first that is not."""
    run = 0
    for index in range(start, end):
        if not present[ids[index]]:
            break
        run += 1
    return run


@njit(nogil=True, cache=True)
def _leading_distances(  # pragma: no cover
    ids: np.ndarray, starts: np.ndarray, distances: np.ndarray, previous: np.ndarray, never: int
) -> None:
    """Turn each read's LRU distance into the largest distance, as the request arrived,
    of the blocks up to it in its request (``never`` when one of them was not cached at
    all), in place; ``previous`` (one per id) comes filled with -1."""
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


def lru_distances(ids: np.ndarray, dtype: type[np.signedinteger] = np.int64) -> np.ndarray:
    """`LruStack` distances of dense ``ids`` (any integer dtype), fed in pieces so that no
    int64 copy of the whole stream is made, as ``dtype`` (int32 holds them below two
    billion distinct ids)."""
    stack = LruStack()
    out = np.empty(len(ids), dtype=dtype)
    for start in range(0, len(ids), _PIECE):
        out[start : start + _PIECE] = stack.distances(ids[start : start + _PIECE])
    return out


def leading_lru_distances(
    ids: np.ndarray, starts: np.ndarray, dtype: type[np.signedinteger] = np.int64
) -> np.ndarray:
    """For a hash-chained LRU pool (every block of a request touched after its hit is
    counted): per block read, the smallest capacity minus one that serves it and every
    block before it in its request when the request arrives, so that a request's hit at
    capacity C is its reads with a value below C.  A read that no capacity serves (it or
    a block before it in its request was never read before) gets the largest ``dtype``
    (for int64, above any capacity; for int32, above any below two billion).

    One stack-distance pass answers every capacity: a block's distance as the request
    arrived is its distance when read less the blocks read before it in the request
    whose previous read was older than its own."""
    ids = np.ascontiguousarray(ids)
    distances = lru_distances(ids, dtype)
    n_items = int(ids.max()) + 1 if len(ids) else 0
    previous = np.full(n_items, -1, dtype=narrowest(len(ids)))
    never = int(np.iinfo(dtype).max)
    _leading_distances(ids, np.ascontiguousarray(starts, np.int64), distances, previous, never)
    return distances


@njit(nogil=True, cache=True)
def _hash_chain_fifo(  # pragma: no cover
    ids: np.ndarray, starts: np.ndarray, n_items: int, capacity: int, queue: np.ndarray
) -> np.ndarray:
    room = len(queue)  # a ring: the pool holds at most capacity + 1
    first = last = 0
    present = np.zeros(n_items, dtype=np.bool_)
    hits = np.zeros(len(starts) - 1, dtype=np.int64)
    for request in range(len(starts) - 1):
        start, end = starts[request], starts[request + 1]
        hits[request] = leading_run(ids, start, end, present)
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
    ids = np.ascontiguousarray(ids)
    queue = np.empty(min(capacity, n_items) + 2, dtype=ids.dtype)
    return _hash_chain_fifo(ids, np.ascontiguousarray(starts, np.int64), n_items, capacity, queue)


@njit(nogil=True, cache=True)
def _chained(  # pragma: no cover
    ids: np.ndarray, starts: np.ndarray, parent_of: np.ndarray, root: int
) -> bool:
    """Fill ``parent_of`` (one per id, -1 on entry: not seen) with each id's parent,
    ``root`` for a request's first; False as soon as an id follows another parent."""
    for request in range(len(starts) - 1):
        parent = root
        for index in range(starts[request], starts[request + 1]):
            item = ids[index]
            if parent_of[item] < 0:
                parent_of[item] = parent
            elif parent_of[item] != parent:
                return False
            parent = item
    return True


def chained_tree(
    ids: np.ndarray, starts: np.ndarray, n_items: int
) -> tuple[np.ndarray, int] | None:
    """When every block id of the trace (dense, below ``n_items``) always follows the same
    id in its request (or always starts one), an id names one path of the prefix tree
    and the ids stand for `radix_nodes`: each id's parent (``n_items``, the root, for a
    request's first; the root's own entry is the root) and the root.  None otherwise."""
    root = n_items
    parent_of = np.full(n_items + 1, -1, dtype=narrowest(n_items + 1))
    chained = _chained(
        np.ascontiguousarray(ids), np.ascontiguousarray(starts, np.int64), parent_of, root
    )
    parent_of[root] = root
    return (parent_of, root) if chained else None


def radix_nodes(ids: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The node of the prefix tree each block of each request is (1, 2, ...; 0 is the
    root), and each node's parent: requests share a node when they share every block up
    to it."""
    lengths = np.diff(starts)
    nodes = np.zeros(len(ids), dtype=narrowest(len(ids) + 1))
    parent = np.zeros(1, dtype=nodes.dtype)
    numbering = ItemIds()
    above = np.zeros(len(lengths), dtype=np.int64)  # each request's node at the last depth
    for depth in range(int(lengths.max(initial=0))):
        deep = np.flatnonzero(lengths > depth)
        at = starts[deep] + depth
        numbered = numbering.ids((above[deep] << np.int64(31)) | ids[at].astype(np.int64)) + 1
        if numbering.count + 1 > len(parent):
            grown = np.zeros(numbering.count + 1 - len(parent), parent.dtype)
            parent = np.concatenate([parent, grown])
        parent[numbered] = above[deep]
        nodes[at] = numbered
        above[deep] = numbered
    return nodes, parent


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
    starts: np.ndarray, inputs: np.ndarray, block_tokens: int, out: np.ndarray
) -> None:
    for request in range(len(starts) - 1):
        start = starts[request]
        for index in range(start, starts[request + 1]):
            left = inputs[request] - (index - start) * block_tokens
            out[index] = min(max(left, 0), block_tokens)


def block_tokens(starts: np.ndarray, inputs: np.ndarray, block_size: int) -> np.ndarray:
    """Per block read: its tokens, ``block_size`` but for what is left of the request's
    ``inputs`` tokens in its last blocks (none past the input), as int16 where the block
    size allows."""
    starts = np.ascontiguousarray(starts, np.int64)
    out = np.empty(starts[-1], dtype=np.int16 if block_size < 2**15 else np.int32)
    _block_tokens(starts, np.ascontiguousarray(inputs, np.int64), block_size, out)
    return out


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
    counts = np.zeros(min(limit, len(distances)) + 1, dtype=order.dtype)
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


@njit(nogil=True, cache=True)
def _bucket_sums(  # pragma: no cover
    distances: np.ndarray, tokens: np.ndarray, first: int, capacities: np.ndarray, out: np.ndarray
) -> None:
    """``out`` (zeroed) per capacity: the reads from ``first`` on whose distance is
    below it, and their tokens."""
    for index in range(first, len(distances)):
        distance = distances[index]
        if 0 <= distance < capacities[-1]:
            at = np.searchsorted(capacities, distance, side="right")  # the first above
            out[at, 0] += 1
            out[at, 1] += tokens[index]
    for at in range(1, len(capacities)):
        out[at, 0] += out[at - 1, 0]
        out[at, 1] += out[at - 1, 1]


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
    their weights summed in order of distance, then of read (a sort of the reads; without
    shares, counts per capacity alone)."""
    counted = np.zeros((len(capacities), 2), dtype=np.int64)
    weighted = np.zeros(len(capacities), dtype=np.float64)
    capacities = np.ascontiguousarray(capacities, np.int64)
    if len(capacities) and not len(shares):
        _bucket_sums(distances, tokens, first, capacities, counted)
    elif len(capacities):
        order = np.empty(len(distances) - first, dtype=narrowest(len(distances)))
        _distance_sums(
            distances,
            np.ascontiguousarray(starts, np.int64),
            tokens,
            shares,
            first,
            capacities,
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
def _run_sums(
    runs: np.ndarray, starts: np.ndarray, tokens: np.ndarray, first: int
) -> tuple[int, int]:  # pragma: no cover
    hits = hit_tokens = 0
    for request in range(first, len(starts) - 1):
        hits += runs[request]
        for index in range(starts[request], starts[request] + runs[request]):
            hit_tokens += tokens[index]
    return hits, hit_tokens


def run_sums(
    runs: np.ndarray, starts: np.ndarray, tokens: np.ndarray, first: int
) -> tuple[int, int]:
    """The leading ``runs`` of the requests from ``first`` on, as hit reads and their
    tokens."""
    hits, hit_tokens = _run_sums(runs, np.ascontiguousarray(starts, np.int64), tokens, first)
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
