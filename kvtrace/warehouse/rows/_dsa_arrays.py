"""Arrow and NumPy helpers of the DSA writer: columns as arrays, position lists, row order.

`kvtrace.warehouse.rows.dsa_writer` and its helpers handle columns that may be chunked,
position lists (`kvtrace.kernels.block_stats.PositionLists`) that rows are taken from,
and tables split by (dataset, block size) in (request, step, layer) order.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvtrace.kernels.block_stats import PositionLists

INT32_MAX = 2**31 - 1


def combined(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """``column`` as one array (no copy when it already is one chunk)."""
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column


def take_rows(cols: dict[str, pa.ChunkedArray | pa.Array], rows: np.ndarray) -> dict[str, pa.Array]:
    """The rows ``rows`` of every column of ``cols``."""
    indices = pa.array(rows)
    return {name: combined(column).take(indices) for name, column in cols.items()}


def owned(array: pa.Array) -> pa.Array:
    """A copy of ``array`` with buffers of its own (the lists built here already are)."""
    if pa.types.is_list(array.type):
        return array
    return pa.concat_arrays([array])


def ints(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """``column`` as int64 values."""
    return np.asarray(combined(column).to_numpy(zero_copy_only=False), dtype=np.int64)


def floats(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """``column`` as float64 values (NaN where NULL)."""
    return np.asarray(
        combined(column).cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64
    )


def take_lists(lists: PositionLists, keep: np.ndarray) -> PositionLists:
    """The rows of ``lists`` where ``keep`` is true."""
    rows = lists.row_ids()
    values = lists.values[keep[rows]]
    lengths = lists.lengths[keep]
    return PositionLists(values, np.concatenate(([0], np.cumsum(lengths))))


def lists_equal(a: PositionLists, b: PositionLists) -> np.ndarray:
    """Per row, whether ``a`` and ``b`` hold the same list."""
    same_length = a.lengths == b.lengths
    equal: np.ndarray = same_length.copy()
    rows = np.flatnonzero(same_length)
    if len(rows):
        mask = same_length[a.row_ids()]
        differ = a.values[mask] != b.values[same_length[b.row_ids()]]
        row_of = a.row_ids()[mask]
        bad_rows = np.unique(row_of[differ])
        equal[bad_rows] = False
    return equal


def rows_with_null_values(lists: pa.ListArray) -> np.ndarray:
    """Rows of ``lists`` that hold a null element."""
    if lists.values.null_count == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = lists.offsets.to_numpy().astype(np.int64)
    values = lists.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    nulls = np.asarray(values.is_null().to_numpy(zero_copy_only=False))
    rows = np.repeat(np.arange(len(lists), dtype=np.int64), np.diff(offsets))
    return np.unique(rows[nulls])


def key_bytes(keys: np.ndarray) -> list[bytes]:
    """Each row of a contiguous (n, 4) int64 array as 32 bytes (a hashable record key)."""
    rows = keys.view(np.dtype((np.void, 32))).ravel()
    return cast(list[bytes], rows.tolist())  # unstructured void items list as bytes


def sort_key(table: pa.Table, row: int) -> tuple[int, int, int]:
    """The (request_id, step_idx, layer_id) of ``row``."""
    return tuple(table[c][row].as_py() for c in ("request_id", "step_idx", "layer_id"))


def is_sorted(table: pa.Table) -> bool:
    """Whether rows already run in (request_id, step_idx, layer_id) order."""
    request, step, layer = (table[c].to_numpy() for c in ("request_id", "step_idx", "layer_id"))
    later_step = (step[1:] > step[:-1]) | ((step[1:] == step[:-1]) & (layer[1:] >= layer[:-1]))
    in_order = (request[1:] > request[:-1]) | ((request[1:] == request[:-1]) & later_step)
    return bool(in_order.all())


def partitions(table: pa.Table) -> list[pa.Table]:
    """``table`` split by (dataset, block size); no copy when it holds one of each."""
    keys = table.select(["dataset", "block_size"]).group_by(["dataset", "block_size"]).aggregate([])
    if keys.num_rows == 1:
        return [table]
    parts = []
    for dataset, size in zip(
        keys["dataset"].to_pylist(), keys["block_size"].to_pylist(), strict=True
    ):
        mask = pc.and_(pc.equal(table["dataset"], dataset), pc.equal(table["block_size"], size))
        parts.append(table.filter(mask))
    return parts
