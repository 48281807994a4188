"""From stored DSA rows to the access stream: each access's item id, step slot and whether
it is its request's first touch of the item.

The rows come in stream order (`order`), each a list of ascending block (or position) ids
that `divisor` re-bins: ``block = value // divisor``.  At granularity ``block`` the rows of
one group (a request's decode step: every layer of it) are merged into one ascending union
of blocks; at ``layer_block`` each row is read on its own and its item is (layer, block).

A request's block j is item ``block_items[block_offsets[r] + j]`` (the caller numbers them:
private per request, or shared by content), times ``layers`` plus the layer's index at
``layer_block``.  ``seen`` (one flag per request, layer and block, laid out like the items)
remembers what each request touched, so a request's first touch of an item is known
whichever request brought the item in.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def stream_items(  # pragma: no cover
    values: np.ndarray,
    offsets: np.ndarray,
    order: np.ndarray,
    group_start: np.ndarray,
    row_request: np.ndarray,
    row_layer: np.ndarray,
    row_slot: np.ndarray,
    divisor: int,
    widest: int,
    merge_layers: bool,
    layers: int,
    block_offsets: np.ndarray,
    block_items: np.ndarray,
    seen: np.ndarray,
    out_items: np.ndarray,
    out_slots: np.ndarray,
    out_first: np.ndarray,
) -> int:
    """Fill the outputs with the accesses of the rows in ``order``; returns how many.

    ``group_start[k]`` is True where ordered row k begins a new (request, step) group;
    ``row_layer`` is a layer's index among the run's layers (ignored when merging);
    ``widest`` bounds every block id (the most blocks a request has)."""
    n = 0
    longest = widest + 1  # a group's union holds at most one entry per block
    for q in range(len(order)):
        longest = max(longest, offsets[order[q] + 1] - offsets[order[q]])
    scratch = np.empty(longest, dtype=np.int64)  # one group's blocks, not the window's
    mark = np.full(widest + 1, -1, dtype=np.int64)  # the group that last saw each block
    k = 0
    rows = len(order)
    while k < rows:
        end = k + 1
        if merge_layers:
            while end < rows and not group_start[end]:
                end += 1
        count = 0
        if merge_layers and end - k > 1:  # the union of the group's rows, ascending
            low, high = widest, -1
            for q in range(k, end):
                row = order[q]
                for v in range(offsets[row], offsets[row + 1]):
                    block = values[v] // divisor
                    if mark[block] != k:
                        mark[block] = k
                        low = min(low, block)
                        high = max(high, block)
            for block in range(low, high + 1):
                if mark[block] == k:
                    scratch[count] = block
                    count += 1
        else:
            row = order[k]
            previous = -1
            for v in range(offsets[row], offsets[row + 1]):
                block = values[v] // divisor
                if block != previous:  # ascending values: equal blocks are adjacent
                    scratch[count] = block
                    count += 1
                    previous = block
        row = order[k]
        request = row_request[row]
        layer = 0 if merge_layers else row_layer[row]
        base = block_offsets[request]
        for i in range(count):
            block_item = base + scratch[i]
            flag = block_item * layers + layer
            out_items[n] = block_items[block_item] * layers + layer
            out_slots[n] = row_slot[row]
            out_first[n] = not seen[flag]
            seen[flag] = True
            n += 1
        k = end
    return n


@njit(nogil=True, cache=True)
def distinct_per_bucket(  # pragma: no cover
    items: np.ndarray, buckets: np.ndarray, last_bucket: np.ndarray, counts: np.ndarray
) -> None:
    """Add to ``counts[b]`` the items first touched in bucket b (``buckets`` ascending over
    a unit's stream); ``last_bucket`` (one entry per item, -1 at first) carries over
    between calls."""
    for i in range(len(items)):
        x = items[i]
        if last_bucket[x] != buckets[i]:
            last_bucket[x] = buckets[i]
            counts[buckets[i]] += 1


@njit(nogil=True, cache=True)
def first_touches(items: np.ndarray, seen: np.ndarray) -> np.ndarray:  # pragma: no cover
    """Which accesses touch their item for the first time (``seen`` carries over)."""
    out = np.empty(len(items), dtype=np.bool_)
    for i in range(len(items)):
        out[i] = not seen[items[i]]
        seen[items[i]] = True
    return out
