"""Canonical DSA columns of the steps a `DsaTracer` traced, built on its writer thread.

A traced step is the top-k positions (and scores) of every traced layer for every request
of the batch; several steps become one batch of canonical columns
(`kvtrace.warehouse.rows.dsa_columns`) per block size, with the KV tier model's reads of
the blocks each row touched.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa

from kvtrace.collectors.kv_tiers import TierFetch, TierModel
from kvtrace.kernels import block_stats


def canonical_columns(
    steps: list[tuple[Any, ...]],
    block_sizes: Sequence[int],
    tiers: Mapping[int, TierModel],
    *,
    run_name: str,
    dataset: str,
    topk: int | None,
    full_scores: bool,
) -> Iterator[dict[str, Any]]:
    """Canonical columns of several steps, once per block size (``tiers`` holds its model)."""
    parts = [step_rows(*step, full_scores=full_scores) for step in steps]
    flat_positions = np.concatenate([p["positions"] for p in parts])
    lengths = np.concatenate([p["lengths"] for p in parts])
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    lists = block_stats.PositionLists(flat_positions, offsets)
    rows = len(lengths)
    positions = pa.ListArray.from_arrays(
        pa.array(offsets.astype(np.int32)), pa.array(flat_positions)
    )
    request_of_row = np.concatenate([p["request"] for p in parts])
    start_of_row = np.concatenate([p["start"] for p in parts])
    layer_of_row = np.concatenate([p["layer"] for p in parts])
    group_of_row = np.concatenate([p["kv_group"] for p in parts])
    latency = np.concatenate([p["latency"] for p in parts])
    ts_us = np.concatenate([p["ts_us"] for p in parts])
    batch_step = np.concatenate([p["batch_step"] for p in parts])
    score_cols = score_columns([p["scores"] for p in parts], offsets, rows, full_scores)
    info = [q for p in parts for q in p["info"]]
    hit = pa.array([bool(q and q.prefix_hit) for q in info])
    region = np.array(
        [(q.cached_tokens if q.prefix_hit else q.key_tokens) if q else 0 for q in info],
        dtype=np.int64,
    )
    keys = pa.array([q.prefix_key if q else None for q in info], pa.string())
    for block_size in block_sizes:
        distinct = block_stats.touched_blocks(lists, block_size)
        touched = np.split(distinct.values.astype(np.int64), distinct.offsets[1:-1])
        heads = group_of_row < 0  # a KV group's own selection reads no tier
        fetched = tiers[block_size].fetch(
            batch_step[heads],
            request_of_row[heads],
            layer_of_row[heads],
            [blocks for blocks, kept in zip(touched, heads, strict=True) if kept],
            block_size,
        )
        yield {
            **tier_columns(fetched, heads),
            "run_name": pa.array([run_name] * rows),
            "dataset": pa.array([dataset] * rows),
            "layer_id": pa.array(layer_of_row),
            "kv_group": pa.array(group_of_row, pa.int64(), mask=group_of_row < 0),
            "topk": pa.array([topk] * rows, pa.int64()),
            "prefix_hit": hit,
            "prefix_cached_blocks": pa.array(-(-region // block_size)),
            "prefix_region_tokens": pa.array(region),
            "prefix_key": keys,
            "request_id": pa.array(request_of_row),
            "step_idx": pa.array(start_of_row),
            "seq_len": pa.array(start_of_row + 1),
            "positions": positions,
            "block_size": pa.array([block_size] * rows, pa.int64()),
            "step_latency_us": pa.array(latency, pa.float64()),
            "ts_us": pa.array(ts_us, pa.float64()),
            "batch_step": pa.array(batch_step, pa.int64()),
            **score_cols,
        }


def tier_columns(fetched: dict[str, TierFetch], kept: np.ndarray) -> dict[str, pa.Array]:
    """The tier model's reads of the ``kept`` rows (the all-heads rows); the other rows'
    tier columns are NULL."""
    columns: dict[str, pa.Array] = {}
    missing = pa.array(~kept)
    for tier, fetch in fetched.items():
        counts = np.zeros(len(kept), np.int64)
        counts[kept] = [len(h) for h in fetch.hit_blocks]
        values = np.concatenate(fetch.hit_blocks) if fetch.hit_blocks else np.zeros(0, np.int64)
        columns[f"{tier}_hit_blocks"] = pa.ListArray.from_arrays(
            pa.array(np.concatenate(([0], np.cumsum(counts))).astype(np.int32)),
            pa.array(values, pa.int64()),
            mask=missing,
        )
        columns[f"{tier}_bytes_read"] = _spread(fetch.bytes_read, kept, pa.int64())
        columns[f"{tier}_read_ops"] = _spread(fetch.read_ops, kept, pa.int64())
        columns[f"{tier}_latency_us"] = _spread(fetch.latency_us, kept, pa.float64())
    return columns


def _spread(values: Any, kept: np.ndarray, kind: pa.DataType) -> pa.Array:
    """``values`` of the kept rows at their places, NULL elsewhere (and where NaN)."""
    spread = np.full(len(kept), np.nan)
    spread[kept] = np.asarray(values, np.float64)
    return pa.array(spread, from_pandas=True).cast(kind)


def step_rows(
    layers: np.ndarray,
    indices: np.ndarray,
    values: np.ndarray | None,
    request_ids: np.ndarray,
    starts: np.ndarray,
    latency_us: float,
    ts_us: float,
    requests: Mapping[int, Any],
    batch_step: int,
    groups: np.ndarray,
    *,
    full_scores: bool,
) -> dict[str, Any]:
    """Row-level arrays of one step: rows run layer by layer, batch row by batch row.

    Positions come out ascending within each row (so the writer only checks that they
    are); scores follow them only when they are kept in full, since min/mean/max do not
    depend on the order."""
    n_layers, batch, k = indices.shape
    rows = n_layers * batch
    flat = indices.reshape(rows, k)
    if flat.size and flat.max() < 2**31:  # a narrower sort, when the values fit
        flat = flat.astype(np.int32)
    scores = None
    if values is None:
        flat = np.sort(flat, axis=1)
    elif full_scores:
        order = np.argsort(flat, axis=1)
        flat = np.take_along_axis(flat, order, axis=1)
        ordered = np.take_along_axis(values.reshape(rows, k), order, axis=1)
        scores = (ordered.astype(np.float64), flat >= 0)
    else:
        scores = (values.reshape(rows, k).astype(np.float64), flat >= 0)
        flat = np.sort(flat, axis=1)
    keep = flat >= 0
    return {
        "positions": flat[keep],
        "lengths": keep.sum(axis=1),
        "request": np.tile(np.asarray(request_ids, dtype=np.int64), n_layers),
        "start": np.tile(np.asarray(starts, dtype=np.int64), n_layers),
        "layer": np.repeat(layers, batch),
        "kv_group": np.repeat(groups, batch),
        "latency": np.full(rows, latency_us),
        "ts_us": np.full(rows, ts_us),
        "batch_step": np.full(rows, batch_step, dtype=np.int64),
        "scores": scores,
        "info": [requests[r] for r in request_ids] * n_layers,
    }


def score_columns(
    parts: list[Any], offsets: np.ndarray, rows: int, full: bool
) -> dict[str, pa.Array]:
    """Score statistics (and, when ``full``, the scores) of every row; NULL without scores."""
    nulls = pa.nulls(rows, pa.float64())
    if all(p is None for p in parts):
        return {
            "scores": pa.nulls(rows, pa.list_(pa.float32())),
            "score_min": nulls,
            "score_mean": nulls,
            "score_max": nulls,
        }
    stats: dict[str, list[np.ndarray]] = {
        name: [] for name in ("score_min", "score_mean", "score_max")
    }
    kept, has = [], []
    for part in parts:
        if part is None:
            continue
        values, keep = part
        if keep.all() and values.shape[1]:  # no padding: plain reductions
            stats["score_min"].append(values.min(axis=1))
            stats["score_mean"].append(values.mean(axis=1))
            stats["score_max"].append(values.max(axis=1))
            kept.append(values.ravel())
        else:
            masked = np.where(keep, values, np.nan)
            with np.errstate(invalid="ignore"), _quiet_nan_warnings():
                stats["score_min"].append(np.nanmin(masked, axis=1))
                stats["score_mean"].append(np.nanmean(masked, axis=1))
                stats["score_max"].append(np.nanmax(masked, axis=1))
            kept.append(values[keep])
        has.append(len(values))
    if sum(has) != rows:  # some steps came without scores: keep the columns NULL
        return {
            "scores": pa.nulls(rows, pa.list_(pa.float32())),
            "score_min": nulls,
            "score_mean": nulls,
            "score_max": nulls,
        }
    scores = (
        pa.ListArray.from_arrays(
            pa.array(offsets.astype(np.int32)), pa.array(np.concatenate(kept), pa.float32())
        )
        if full
        else pa.nulls(rows, pa.list_(pa.float32()))
    )
    return {
        "scores": scores,
        **{
            name: pa.array(np.concatenate(v), pa.float64(), from_pandas=True)
            for name, v in stats.items()
        },
    }


@contextmanager
def _quiet_nan_warnings() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield
