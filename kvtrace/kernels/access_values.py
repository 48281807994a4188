"""What each access of the stream carries besides its item, in the order
`kvtrace.kernels.access_items.stream_items` emits the accesses (a group's blocks
ascending; a group is a request's decode step at granularity ``block``, one row at
``layer_block``): the block's score, and the tokens a fetch of only the touched
sub-blocks moves.

The rows' values are token positions (``block = position // block_size``).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(inline="always", cache=True)
def _group_end(
    k: int, rows: int, group_start: np.ndarray, merge_layers: bool
) -> int:  # pragma: no cover
    end = k + 1
    if merge_layers:
        while end < rows and not group_start[end]:
            end += 1
    return end


@njit(nogil=True, cache=True)
def access_scores(  # pragma: no cover
    values: np.ndarray,
    scores: np.ndarray,
    offsets: np.ndarray,
    order: np.ndarray,
    group_start: np.ndarray,
    block_size: int,
    widest: int,
    merge_layers: bool,
    out: np.ndarray,
) -> int:
    """Each access's score: the largest score of the positions its group selected in
    its block (``scores`` aligned with ``values``).  Returns the accesses filled."""
    best = np.full(widest + 1, -np.inf)
    mark = np.full(widest + 1, -1, dtype=np.int64)
    n, k, rows = 0, 0, len(order)
    while k < rows:
        end = _group_end(k, rows, group_start, merge_layers)
        low, high = widest, -1
        for q in range(k, end):
            row = order[q]
            for v in range(offsets[row], offsets[row + 1]):
                block = values[v] // block_size
                if mark[block] != k:
                    mark[block] = k
                    best[block] = scores[v]
                    low, high = min(low, block), max(high, block)
                else:
                    best[block] = max(best[block], scores[v])
        for block in range(low, high + 1):
            if mark[block] == k:
                out[n] = best[block]
                n += 1
        k = end
    return n


@njit(nogil=True, cache=True)
def access_subblock_tokens(  # pragma: no cover
    values: np.ndarray,
    offsets: np.ndarray,
    order: np.ndarray,
    group_start: np.ndarray,
    block_size: int,
    widest: int,
    merge_layers: bool,
    sizes: np.ndarray,
    out: np.ndarray,
) -> int:
    """``out[i, j]``: the tokens access i moves when each row (a layer) of its group
    fetches only the sub-blocks of ``sizes[j]`` tokens it touched in the block: the
    block's tokens cut into sub-blocks from its start, the last one shorter when the size
    does not divide the block.  Returns the accesses filled."""
    tokens = np.zeros((widest + 1, len(sizes)), dtype=np.int64)
    mark = np.full(widest + 1, -1, dtype=np.int64)
    previous = np.full(len(sizes), -1, dtype=np.int64)
    n, k, rows = 0, 0, len(order)
    while k < rows:
        end = _group_end(k, rows, group_start, merge_layers)
        low, high = widest, -1
        for q in range(k, end):
            row = order[q]
            previous[:] = -1  # a row's positions ascend: its sub-blocks come in order
            for v in range(offsets[row], offsets[row + 1]):
                block = values[v] // block_size
                if mark[block] != k:
                    mark[block] = k
                    tokens[block, :] = 0
                    low, high = min(low, block), max(high, block)
                inside = values[v] - block * block_size
                for j in range(len(sizes)):
                    sub = block * block_size + inside // sizes[j] * sizes[j]  # its first token
                    if sub != previous[j]:
                        previous[j] = sub
                        tokens[block, j] += min(sizes[j], (block + 1) * block_size - sub)
        for block in range(low, high + 1):
            if mark[block] == k:
                out[n, :] = tokens[block, :]
                n += 1
        k = end
    return n
