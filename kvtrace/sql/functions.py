"""DuckDB functions over ``selected_pos`` lists, vectorised on Arrow buffers.

(The functions behind the analyses, ``kvtrace_hit_curve`` and its kin, are the analysis
layer's: `kvtrace.analysis.functions`.)


DuckDB's list lambdas visit one element at a time; these functions hand a whole vector
of lists to NumPy (`kvtrace.kernels.block_stats`).  A plain ``duckdb`` shell, which cannot load
Python, gets SQL macros of the same names and results from ``udf_fallback.sql``.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
from duckdb import func

from kvtrace.kernels import block_stats
from kvtrace.kernels.block_stats import PositionLists

BLOCK_STATS = pa.struct(
    [
        ("unique_blocks", pa.int32()),
        ("total_blocks_in_use", pa.int32()),
        ("touched_block_ratio", pa.float64()),
        ("tokens_per_block_mean", pa.float64()),
        ("tokens_per_block_p50", pa.float64()),
        ("tokens_per_block_p95", pa.float64()),
    ]
)
OFFSET_STATS = pa.struct(
    [
        ("offset_min", pa.int32()),
        ("offset_p50", pa.float64()),
        ("offset_p95", pa.float64()),
        ("offset_max", pa.int32()),
        ("offset_mean", pa.float64()),
        *[(f"within_{w}", pa.float64()) for w in block_stats.RECENCY_WINDOWS],
    ]
)


def _numbers(column: pa.ChunkedArray) -> np.ndarray:
    return np.asarray(column.to_numpy(), dtype=np.int64)


def _struct(fields: dict[str, np.ndarray], type_: pa.StructType, empty: np.ndarray) -> pa.Array:
    arrays = [pa.array(fields[f.name], f.type, from_pandas=True) for f in type_]
    return pa.StructArray.from_arrays(arrays, fields=list(type_), mask=pa.array(empty))


def block_stats_udf(
    positions: pa.ChunkedArray, seq_len: pa.ChunkedArray, block_size: pa.ChunkedArray
) -> pa.Array:
    lists = PositionLists.from_arrow(positions)
    stats = block_stats.block_stats(lists, _numbers(seq_len), _numbers(block_size))
    fields = {f.name: getattr(stats, f.name) for f in BLOCK_STATS}
    return _struct(fields, BLOCK_STATS, np.zeros(lists.num_rows, dtype=bool))


def offset_stats_udf(positions: pa.ChunkedArray, seq_len: pa.ChunkedArray) -> pa.Array:
    lists = PositionLists.from_arrow(positions)
    stats = block_stats.offset_stats(lists, _numbers(seq_len))
    fields = {f.name: getattr(stats, f.name) for f in OFFSET_STATS if hasattr(stats, f.name)}
    fields.update({f"within_{w}": share for w, share in stats.within.items()})
    return _struct(fields, OFFSET_STATS, lists.lengths == 0)


def prefix_blocks_udf(
    positions: pa.ChunkedArray, region_blocks: pa.ChunkedArray, block_size: pa.ChunkedArray
) -> pa.Array:
    """The distinct selected blocks with id < region_blocks, ascending."""
    lists = PositionLists.from_arrow(positions)
    blocks = np.asarray(region_blocks.to_numpy(), dtype=np.float64)
    return block_stats.prefix_block_lists(lists, blocks, _numbers(block_size)).to_arrow()


def touched_blocks_udf(positions: pa.ChunkedArray, block_size: pa.ChunkedArray) -> pa.Array:
    """The distinct blocks of each ascending position list, ascending."""
    lists = PositionLists.from_arrow(positions)
    if lists.num_rows == 0:
        return pa.array([], pa.list_(pa.int32()))
    return block_stats.touched_blocks(lists, _numbers(block_size)).to_arrow()


def block_keys_udf(tokens: pa.ChunkedArray, block_size: pa.ChunkedArray) -> pa.Array:
    """The content key of every full block of each token list (`chained_block_keys`);
    NULL for a NULL list."""
    from kvtrace.kernels import block_keys  # numba: compiled on first use, not on connect

    lists = PositionLists.from_arrow(tokens)
    sizes = _numbers(block_size)
    keys = np.zeros(0, dtype=np.int64)
    counts = np.zeros(lists.num_rows, dtype=np.int64)
    if lists.num_rows:
        size = int(sizes[0])
        if (sizes != size).any() or size < 1:
            raise ValueError("kvtrace_block_keys takes one positive block size per call")
        keys, key_offsets = block_keys.chained_block_keys(lists.values, lists.offsets, size)
        counts = np.diff(key_offsets)
    offsets = pa.array(np.concatenate(([0], np.cumsum(counts))).astype(np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(keys, pa.int64()), mask=_nulls(tokens))


def prefix_block_keys_udf(prefix_key: pa.ChunkedArray, blocks: pa.ChunkedArray) -> pa.Array:
    """The keys (prefix key, j) of blocks j = 0 .. blocks - 1; NULL without a prefix key."""
    from kvtrace.kernels import block_keys

    keys = prefix_key.to_pylist()
    counts = np.maximum(np.nan_to_num(np.asarray(blocks.to_numpy(), dtype=np.float64)), 0)
    counts = counts.astype(np.int64)
    values = block_keys.prefix_block_keys(keys, counts)
    lengths = np.where([k is None for k in keys], 0, counts)
    offsets = pa.array(np.concatenate(([0], np.cumsum(lengths))).astype(np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(values, pa.int64()), mask=_nulls(prefix_key))


def _nulls(column: pa.ChunkedArray) -> pa.Array:
    return pa.array(np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool))


_ARROW = func.PythonUDFType.ARROW


def register(con: duckdb.DuckDBPyConnection) -> None:
    """Install the vectorised list functions on ``con``."""
    con.create_function(
        "kvtrace_touched_blocks",
        touched_blocks_udf,
        ["INTEGER[]", "INTEGER"],
        "INTEGER[]",
        type=_ARROW,
    )
    con.create_function(
        "kvtrace_block_stats",
        block_stats_udf,
        ["INTEGER[]", "INTEGER", "INTEGER"],
        duckdb_type(BLOCK_STATS),
        type=_ARROW,
    )
    con.create_function(
        "kvtrace_offset_stats",
        offset_stats_udf,
        ["INTEGER[]", "INTEGER"],
        duckdb_type(OFFSET_STATS),
        type=_ARROW,
    )
    con.create_function(
        "kvtrace_block_keys", block_keys_udf, ["INTEGER[]", "INTEGER"], "BIGINT[]", type=_ARROW
    )
    con.create_function(
        "kvtrace_prefix_block_keys",
        prefix_block_keys_udf,
        ["VARCHAR", "BIGINT"],
        "BIGINT[]",
        type=_ARROW,
    )
    con.create_function(
        "kvtrace_prefix_blocks",
        prefix_blocks_udf,
        ["INTEGER[]", "BIGINT", "INTEGER"],
        "INTEGER[]",
        type=_ARROW,
    )


def duckdb_type(struct: pa.StructType) -> str:
    """The DuckDB name of a struct of integers, doubles, booleans and text."""
    names = {
        pa.bool_(): "BOOLEAN",
        pa.int32(): "INTEGER",
        pa.float64(): "DOUBLE",
        pa.int64(): "BIGINT",
        pa.string(): "VARCHAR",
    }
    return "STRUCT(" + ", ".join(f"{f.name} {names[f.type]}" for f in struct) + ")"
