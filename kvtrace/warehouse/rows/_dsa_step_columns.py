"""The DSA writer's derived ``dsa_steps`` columns: touched blocks, scores and KV tiers.

What a row stores beyond the source's fields: the distinct blocks it touched, its score
statistics (the source's, else computed from its scores) and, per KV tier, the counts and
the hit lists that differ from the obvious value.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvtrace.kernels import block_stats
from kvtrace.kernels.block_stats import PositionLists
from kvtrace.warehouse.rows._dsa_arrays import INT32_MAX, combined, floats, lists_equal
from kvtrace.warehouse.schema.dsa import TIERS


def touched_blocks(
    lists: PositionLists, blocks: block_stats.BlockStats, block_size: np.ndarray
) -> PositionLists:
    """The distinct blocks of each row, ascending."""
    run_start = np.concatenate(([0], np.cumsum(blocks.run_tokens)[:-1])).astype(np.int64)
    ids: np.ndarray = (lists.values[run_start] // block_size[blocks.run_rows]).astype(np.int32)
    return PositionLists(ids, np.concatenate(([0], np.cumsum(blocks.unique_blocks))))


def score_columns(
    cols: dict[str, Any],
    score_values: np.ndarray | None,
    scored_rows: np.ndarray | None,
    lists: PositionLists,
) -> dict[str, pa.Array]:
    """Score min/mean/max: the source's, else computed from the stored scores."""
    stats = {name: floats(cols[name]) for name in ("score_min", "score_mean", "score_max")}
    if score_values is not None and scored_rows is not None:
        nonempty = lists.lengths > 0
        starts = lists.offsets[:-1][nonempty]
        use = (nonempty & scored_rows)[nonempty]
        for name, reducer in (
            ("score_min", np.minimum),
            ("score_max", np.maximum),
            ("score_mean", np.add),
        ):
            value = np.full(lists.num_rows, np.nan)
            reduced = reducer.reduceat(score_values.astype(np.float64), starts)
            if name == "score_mean":
                reduced /= lists.lengths[nonempty]
            value[np.flatnonzero(nonempty)[use]] = reduced[use]
            stats[name] = np.where(np.isnan(stats[name]), value, stats[name])
    return {name: pa.array(value, pa.float32(), from_pandas=True) for name, value in stats.items()}


def tier_columns(cols: dict[str, Any], touched: PositionLists) -> dict[str, pa.Array]:
    """Per KV tier: blocks hit, bytes, reads, latency and the unusual hit lists."""
    out: dict[str, pa.Array] = {}
    for tier in TIERS:
        hits = combined(cols[f"{tier}_hit_blocks"])
        present = np.asarray(pc.is_valid(hits).to_numpy(zero_copy_only=False))
        counts = np.asarray(
            pc.fill_null(pc.list_value_length(hits), 0).to_numpy(zero_copy_only=False)
        )
        out[f"{tier}_blocks"] = pa.array(np.where(present, counts, 0), pa.int32(), mask=~present)
        out[f"{tier}_bytes_read"] = combined(cols[f"{tier}_bytes_read"])
        out[f"{tier}_read_ops"] = combined(cols[f"{tier}_read_ops"]).cast(pa.int32())
        out[f"{tier}_latency_us"] = combined(cols[f"{tier}_latency_us"])
        out[f"{tier}_hit_blocks"] = _unusual_hits(hits, present, counts, tier, touched)
    return out


def _unusual_hits(
    hits: pa.ListArray, present: np.ndarray, counts: np.ndarray, tier: str, touched: PositionLists
) -> pa.Array:
    """Hit lists, kept only where they are not the obvious value.

    The obvious value is every selected block for HBM and nothing for the pools.
    """
    hit_lists = PositionLists.from_arrow(hits.cast(pa.list_(pa.int64())))
    hit_sorted, _, _ = block_stats.sort_lists(
        PositionLists(np.clip(hit_lists.values, 0, INT32_MAX).astype(np.int32), hit_lists.offsets)
    )
    obvious = lists_equal(hit_sorted, touched) if tier == "hbm" else counts == 0
    keep = present & ~obvious
    offsets = np.concatenate(([0], np.cumsum(np.where(keep, hit_sorted.lengths, 0))))
    values = hit_sorted.values[keep[hit_sorted.row_ids()]]
    return pa.ListArray.from_arrays(
        pa.array(offsets.astype(np.int32)), pa.array(values, pa.int32()), mask=pa.array(~keep)
    )
