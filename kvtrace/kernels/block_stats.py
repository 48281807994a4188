"""Vectorised statistics over DSA position lists, computed straight on Arrow list buffers.

A batch of lists is held as ``values`` (all positions, row after row) and ``offsets``
(``len(rows) + 1`` indices into ``values``).  Every function here works on a whole batch
with NumPy, never row by row in Python; ingest and the DuckDB UDFs share them, so the
statistics stored at ingest and those recomputed at query time are the same code.

Semantics (docs/design.md): ``block_id = pos // block_size``; offset of a position
is ``(seq_len - 1) - pos``; percentiles are linear-interpolated (numpy's default).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

RECENCY_WINDOWS = (256, 1024, 4096)


@dataclass
class PositionLists:
    """A batch of position lists: ``values[offsets[i]:offsets[i + 1]]`` is row ``i``."""

    values: np.ndarray
    offsets: np.ndarray
    _rows: np.ndarray | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_arrow(cls, array: pa.Array | pa.ChunkedArray) -> PositionLists:
        """View an Arrow list array's buffers (null lists read as empty)."""
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
        offsets = array.offsets.to_numpy().astype(np.int64, copy=False)
        start, stop = int(offsets[0]), int(offsets[-1])
        values = array.values.slice(start, stop - start)
        values = values.to_numpy(zero_copy_only=False)
        return cls(values, offsets - start)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def num_rows(self) -> int:
        return len(self.offsets) - 1

    def row_ids(self) -> np.ndarray:
        """The row number of every value (computed once)."""
        if self._rows is None:
            self._rows = np.repeat(np.arange(self.num_rows, dtype=np.int64), self.lengths)
        return self._rows

    def to_arrow(self) -> pa.ListArray:
        """As an Arrow ``list<int32>`` array."""
        return pa.ListArray.from_arrays(
            pa.array(self.offsets.astype(np.int32)), pa.array(self.values, type=pa.int32())
        )


def segment_quantile(
    sorted_values: np.ndarray, starts: np.ndarray, counts: np.ndarray, q: float
) -> np.ndarray:
    """Linear-interpolated quantile ``q`` of each segment of ascending ``sorted_values``.

    Segment ``i`` is ``sorted_values[starts[i]:starts[i] + counts[i]]``; empty segments
    give NaN.
    """
    result = np.full(len(counts), np.nan)
    filled = counts > 0
    h = (counts[filled] - 1) * q
    low = np.floor(h).astype(np.int64)
    high = np.minimum(low + 1, counts[filled] - 1)
    base = starts[filled]
    a = sorted_values[base + low].astype(np.float64)
    b = sorted_values[base + high].astype(np.float64)
    result[filled] = a + (h - low) * (b - a)
    return result


def out_of_range_rows(lists: PositionLists, seq_len: np.ndarray) -> np.ndarray:
    """Rows holding a position outside ``[0, seq_len)`` (a boolean mask; no nulls expected)."""
    from kvtrace.kernels.list_checks import scan_rows  # compiled on first use

    outside, _, _ = scan_rows(lists.values, lists.offsets, np.asarray(seq_len, np.int64))
    return outside


def sort_lists(
    lists: PositionLists, scores: np.ndarray | None = None
) -> tuple[PositionLists, np.ndarray | None, np.ndarray]:
    """Sort each row ascending (scores follow their positions); flag rows with duplicates.

    Positions must already be within ``[0, 2**31)``.  Returns the sorted lists, the
    permuted scores and a boolean mask of rows holding a repeated position.
    """
    from kvtrace.kernels.list_checks import scan_rows

    values = lists.values
    unbounded = np.full(lists.num_rows, np.iinfo(np.int64).max)
    _, unsorted, repeated = scan_rows(values, lists.offsets, unbounded)
    if unsorted.any():
        values, scores = _sorted_rows(lists, scores)
        _, _, repeated = scan_rows(values, lists.offsets, unbounded)
    return PositionLists(values.astype(np.int32, copy=False), lists.offsets), scores, repeated


def _sorted_rows(
    lists: PositionLists, scores: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Every row's positions ascending, with ``scores`` following them.

    Rows of one length (a fixed top-k, the usual case) are sorted as the rows of a matrix,
    which NumPy does with SIMD sorting networks; otherwise (row, position) keys are
    sorted as one array.
    """
    lengths = lists.lengths
    width = int(lengths[0]) if len(lengths) else 0
    if width and (lengths == width).all():
        matrix = lists.values.astype(np.int32, copy=False).reshape(-1, width)
        if scores is None:
            return np.sort(matrix, axis=1).ravel(), None
        order = np.argsort(matrix, axis=1)
        return (
            np.take_along_axis(matrix, order, axis=1).ravel(),
            np.take_along_axis(scores.reshape(-1, width), order, axis=1).ravel(),
        )
    key = (lists.row_ids() << 32) | lists.values.astype(np.int64)
    if scores is None:
        key.sort()
    else:
        order = np.argsort(key, kind="stable")
        key = key[order]
        scores = scores[order]
    return (key & 0xFFFFFFFF).astype(np.int32), scores


@dataclass
class BlockStats:
    """Per-row block statistics at one block size, plus the touched blocks themselves."""

    unique_blocks: np.ndarray
    total_blocks_in_use: np.ndarray
    touched_block_ratio: np.ndarray
    tokens_per_block_mean: np.ndarray
    tokens_per_block_p50: np.ndarray
    tokens_per_block_p95: np.ndarray
    run_rows: np.ndarray  # for every touched block: its row
    run_tokens: np.ndarray  # for every touched block: selected positions inside it
    tokens_by_row: np.ndarray  # run_tokens sorted ascending within each row
    run_offsets: np.ndarray  # where each row's blocks start in tokens_by_row


def _block_ids(lists: PositionLists, block_size: np.ndarray | int) -> np.ndarray:
    block_size = np.asarray(block_size)
    if block_size.ndim == 0 or (block_size.size and (block_size == block_size.flat[0]).all()):
        size = int(block_size.flat[0])
        if size & (size - 1) == 0:
            return lists.values >> (size.bit_length() - 1)
        return lists.values // size
    return lists.values // np.repeat(block_size.astype(np.int64), lists.lengths)


def _opens_block_run(lists: PositionLists, blocks: np.ndarray) -> np.ndarray:
    """Whether each position of sorted lists is the first of its block in its row."""
    first = np.ones(len(blocks), dtype=bool)
    first[1:] = blocks[1:] != blocks[:-1]
    first[lists.offsets[:-1][lists.lengths > 0]] = True
    return first


def touched_blocks(lists: PositionLists, block_size: np.ndarray | int) -> PositionLists:
    """The distinct blocks of each row of sorted lists, ascending (``block_size`` one for
    all rows or one per row)."""
    blocks = _block_ids(lists, block_size)
    run_starts = np.flatnonzero(_opens_block_run(lists, blocks))
    return PositionLists(blocks[run_starts], np.searchsorted(run_starts, lists.offsets))


def block_stats(
    lists: PositionLists, seq_len: np.ndarray, block_size: np.ndarray | int
) -> BlockStats:
    """Block statistics of sorted lists (see the module docstring for the semantics)."""
    n = lists.num_rows
    blocks = _block_ids(lists, block_size)
    run_starts = np.flatnonzero(_opens_block_run(lists, blocks))
    counted = np.searchsorted(run_starts, lists.offsets)  # runs begun before each offset
    unique = counted[1:] - counted[:-1]
    run_tokens = np.diff(np.append(run_starts, len(blocks)))
    run_rows = np.repeat(np.arange(n, dtype=np.int64), unique)

    size = np.broadcast_to(np.asarray(block_size, dtype=np.int64), (n,))
    total = -(-seq_len.astype(np.int64) // size)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(total > 0, unique / np.maximum(total, 1), np.nan)
        mean = np.where(unique > 0, lists.lengths / np.maximum(unique, 1), np.nan)
    by_row = _sorted_within_rows(run_rows, run_tokens, n)
    run_offsets = counted[:-1]
    return BlockStats(
        unique_blocks=unique,
        total_blocks_in_use=total,
        touched_block_ratio=ratio,
        tokens_per_block_mean=mean,
        tokens_per_block_p50=segment_quantile(by_row, run_offsets, unique, 0.5),
        tokens_per_block_p95=segment_quantile(by_row, run_offsets, unique, 0.95),
        run_rows=run_rows,
        run_tokens=run_tokens,
        tokens_by_row=by_row,
        run_offsets=run_offsets,
    )


def _sorted_within_rows(run_rows: np.ndarray, run_tokens: np.ndarray, n: int) -> np.ndarray:
    """``run_tokens`` ascending within each of the ``n`` rows (``run_rows``: each one's
    row, ascending).  Counts of tokens per block are small (at most the block size), so
    they are counted per row and written out in order, ten times faster than sorting,
    unless the table of counts would be larger than a few times the runs themselves."""
    top = int(run_tokens.max()) + 1 if len(run_tokens) else 1
    if n * top > 4 * len(run_tokens) + 4096:
        return np.sort((run_rows << 32) | run_tokens) & 0xFFFFFFFF
    counts = np.bincount(run_rows * top + run_tokens, minlength=n * top)
    return np.repeat(np.tile(np.arange(top, dtype=np.int64), n), counts)


@dataclass
class OffsetStats:
    """Per-row offset statistics: offset = (seq_len - 1) - pos, 0 is the current token."""

    count: np.ndarray
    offset_min: np.ndarray
    offset_p50: np.ndarray
    offset_p95: np.ndarray
    offset_max: np.ndarray
    offset_mean: np.ndarray
    within: dict[int, np.ndarray]  # window -> share of positions with offset < window


def offset_stats(
    lists: PositionLists, seq_len: np.ndarray, windows: tuple[int, ...] = RECENCY_WINDOWS
) -> OffsetStats:
    """Offset statistics of sorted lists.

    Uses that offsets of an ascending position list are descending: the offset quantile
    ``q`` is ``(seq_len - 1)`` minus the position quantile ``1 - q`` (exact for linear
    interpolation).
    """
    n = lists.num_rows
    counts = lists.lengths
    last = seq_len.astype(np.float64) - 1
    filled = counts > 0
    first_pos = np.full(n, np.nan)
    last_pos = np.full(n, np.nan)
    first_pos[filled] = lists.values[lists.offsets[:-1][filled]]
    last_pos[filled] = lists.values[lists.offsets[1:][filled] - 1]
    sums = np.zeros(n, dtype=np.int64)
    if filled.any():  # empty rows hold nothing, so each sum runs to the next filled row
        values = lists.values[: lists.offsets[-1]]
        sums[filled] = np.add.reduceat(values, lists.offsets[:-1][filled], dtype=np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_pos = sums / counts
    starts = lists.offsets[:-1]
    within = {}
    if windows:
        keyed = (lists.row_ids() << 32) | lists.values.astype(np.int64)
    for window in windows:
        bound = np.maximum(seq_len.astype(np.int64) - window, 0)
        first_inside = np.searchsorted(keyed, (np.arange(n, dtype=np.int64) << 32) | bound)
        with np.errstate(divide="ignore", invalid="ignore"):
            within[window] = np.where(filled, (lists.offsets[1:] - first_inside) / counts, np.nan)
    return OffsetStats(
        count=counts,
        offset_min=last - last_pos,
        offset_p50=last - segment_quantile(lists.values, starts, counts, 0.5),
        offset_p95=last - segment_quantile(lists.values, starts, counts, 0.05),
        offset_max=last - first_pos,
        offset_mean=last - mean_pos,
        within=within,
    )


def prefix_block_lists(
    lists: PositionLists, region_blocks: np.ndarray, block_size: np.ndarray | int
) -> PositionLists:
    """Per row: the distinct selected blocks with id < ``region_blocks``, ascending.

    Rows whose ``region_blocks`` is NaN get empty lists.  The seed's prefix region covers
    ``ceil(region_tokens / block_size)`` blocks (a partly covered block counts).
    """
    return blocks_below(touched_blocks(lists, block_size), region_blocks)


def blocks_below(touched: PositionLists, region_blocks: np.ndarray) -> PositionLists:
    """Per row: the blocks of ``touched`` (each row's distinct blocks, ascending) with id
    < ``region_blocks``; rows whose ``region_blocks`` is NaN get empty lists.  A writer
    that has the touched blocks already takes the prefix blocks from them (a tenth of
    the positions)."""
    n = touched.num_rows
    known = ~np.isnan(region_blocks)
    limit = np.zeros(n, dtype=np.int64)
    limit[known] = region_blocks[known].astype(np.int64)
    rows = touched.row_ids()
    keep = touched.values < limit[rows]
    counts = np.bincount(rows[keep], minlength=n)
    offsets = np.concatenate(([0], np.cumsum(counts)))
    return PositionLists(touched.values[keep].astype(np.int32), offsets)


def segment_bracket(
    sorted_values: np.ndarray, starts: np.ndarray, counts: np.ndarray, q: float
) -> tuple[np.ndarray, np.ndarray]:
    """The two order statistics around quantile ``q`` of each segment (NaN when empty).

    Every usual percentile method (linear, lower, higher, nearest, midpoint) returns a
    value between them, which is how ingest tells a method difference from a wrong value.
    """
    low_values = np.full(len(counts), np.nan)
    high_values = np.full(len(counts), np.nan)
    filled = counts > 0
    h = (counts[filled] - 1) * q
    base = starts[filled]
    low_values[filled] = sorted_values[base + np.floor(h).astype(np.int64)]
    high_values[filled] = sorted_values[base + np.ceil(h).astype(np.int64)]
    return low_values, high_values
