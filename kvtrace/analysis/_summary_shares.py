"""A DSA run's per-row summary statistics from exact counts, one share of requests at a time.

`share_counts` reads one share's counts (``dsa_summary_shares.sql``); `merge` adds the
counts of several shares; `row_statistics` works the summary's statistics out of them.
Because counts add exactly and the statistics depend on the merged counts alone, any cut
of a run into shares, read anywhere, gives the same numbers bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from kvtrace.sql.catalog import cursor_of

_ALL_REQUESTS = (-(2**63), 2**63 - 1)
_PARTS = ("requests", "blocks", "prefix", "touches")
_HOT_BLOCKS = 20


@dataclass(frozen=True)
class StoredTrace:
    """One stored DSA trace: a run's rows of one dataset at one block size."""

    run_id: str
    dataset: str
    block_size: int


@dataclass(frozen=True)
class ShareCounts:
    """The counts of one share of a trace's requests, or of several merged.

    Each part is a table of its ``_dsa_share_<part>`` macro: key columns and a count ``n``.
    """

    requests: pa.Table
    blocks: pa.Table
    prefix: pa.Table
    touches: pa.Table


def share_counts(
    con: duckdb.DuckDBPyConnection, trace: StoredTrace, requests: tuple[int, int] | None = None
) -> ShareCounts:
    """The counts of ``trace``'s requests with ids in ``requests`` (inclusive), or of all."""
    cursor = cursor_of(con)
    try:
        parts = {
            part: cursor.sql(
                f"FROM _dsa_share_{part}($run, $dataset, $block_size, $first, $last)",
                params=_share(trace, requests),
            ).to_arrow_table()
            for part in _PARTS
        }
    finally:
        cursor.close()
    return ShareCounts(**parts)


def trace_requests(con: duckdb.DuckDBPyConnection, trace: StoredTrace) -> list[int]:
    """The request ids of ``trace``, ascending."""
    return [
        row[0]
        for row in con.execute(
            "SELECT DISTINCT request_id FROM _dsa_share_rows($run, $dataset, $block_size, "
            "$first, $last) ORDER BY request_id",
            _share(trace, None),
        ).fetchall()
    ]


def ingest_histogram_statistics(
    con: duckdb.DuckDBPyConnection, histogram: str, trace: StoredTrace
) -> dict[str, Any]:
    """Statistics of a histogram ingest wrote for ``trace`` (``_dsa_fill_hist_values`` or
    ``_dsa_offset_hist_values``), its files' counts added."""
    table = con.sql(
        "FROM _dsa_trace_histogram($histogram, $run, $dataset, $block_size)",
        params={
            "histogram": histogram,
            "run": trace.run_id,
            "dataset": trace.dataset,
            "block_size": trace.block_size,
        },
    ).to_arrow_table()
    return histogram_statistics(*_columns(table, "value"))


def _share(trace: StoredTrace, requests: tuple[int, int] | None) -> dict[str, Any]:
    """The arguments of the ``_dsa_share_*`` macros for a share of ``trace``."""
    first, last = requests or _ALL_REQUESTS
    return {
        "run": trace.run_id,
        "dataset": trace.dataset,
        "block_size": trace.block_size,
        "first": first,
        "last": last,
    }


def merge(shares: Sequence[ShareCounts]) -> ShareCounts:
    """The counts of ``shares`` together: equal keys add their counts."""
    merged = {}
    for part in _PARTS:
        table = pa.concat_tables([getattr(share, part) for share in shares])
        keys = [name for name in table.column_names if name != "n"]
        summed = table.group_by(keys).aggregate([("n", "sum")])
        merged[part] = summed.rename_columns([*keys, "n"]).select([*keys, "n"])
    return ShareCounts(**merged)


def row_statistics(counts: ShareCounts) -> dict[str, Any]:
    """The summary's fields that are computed over rows: rows, requests, unique_blocks,
    touched_block_ratio, prefix_intersection_ratio and prefix_hot_blocks, and the per-row
    mean of tokens per touched block (``tokens_per_block_mean_per_row``)."""
    unique, context, selected, n = _columns(
        counts.blocks, "unique_blocks", "context_blocks", "selected"
    )
    prefix = _columns(counts.prefix, "inside_blocks", "unique_blocks")
    return {
        "rows": int(np.sum(_column(counts.requests, "n"))),
        "requests": counts.requests.num_rows,
        "unique_blocks": histogram_statistics(unique, n),
        "touched_block_ratio": ratio_statistics(unique, context, n),
        "prefix_intersection_ratio": ratio_statistics(*prefix),
        "prefix_hot_blocks": _hot_blocks(counts.touches),
        "tokens_per_block_mean_per_row": ratio_statistics(selected, unique, n)["mean"],
    }


def histogram_statistics(values: np.ndarray, counts: np.ndarray) -> dict[str, Any]:
    """{count, min, p50, p95, max, mean} of integer observations given as a histogram:
    ``counts[i]`` observations of ``values[i]``; the mean is exact, correctly rounded."""
    total = int(np.sum(counts))
    if total == 0:
        return _empty()
    sum_of_values = sum(v * n for v, n in zip(values.tolist(), counts.tolist(), strict=True))
    return _statistics(values.astype(np.float64), counts, total, sum_of_values / total)


def ratio_statistics(
    numerators: np.ndarray, denominators: np.ndarray, counts: np.ndarray
) -> dict[str, Any]:
    """{count, min, p50, p95, max, mean} of observations ``numerators[i] /
    denominators[i]``, each seen ``counts[i]`` times; a zero denominator is no observation
    (SQL's NULL).  The mean is exact, correctly rounded."""
    keep = denominators != 0
    numerators, denominators, counts = numerators[keep], denominators[keep], counts[keep]
    total = int(np.sum(counts))
    if total == 0:
        return _empty()
    per_denominator: dict[int, int] = {}
    for num, den, n in zip(
        numerators.tolist(), denominators.tolist(), counts.tolist(), strict=True
    ):
        per_denominator[den] = per_denominator.get(den, 0) + num * n
    exact = sum((Fraction(part, den) for den, part in per_denominator.items()), Fraction(0))
    mean = float(exact / total)
    values = numerators.astype(np.float64) / denominators.astype(np.float64)
    return _statistics(values, counts, total, mean)


def _statistics(values: np.ndarray, counts: np.ndarray, total: int, mean: float) -> dict[str, Any]:
    order = np.argsort(values, kind="stable")
    values, ends = values[order], np.cumsum(counts[order])

    def at_rank(rank: int) -> float:
        return float(values[np.searchsorted(ends, rank, side="right")])

    def quantile(q: float) -> float:
        # DuckDB's quantile_cont (numpy's default): interpolate between ranks.
        position = (total - 1) * q
        below = math.floor(position)
        low, high = at_rank(below), at_rank(min(below + 1, total - 1))
        return low if position == below else low + (position - below) * (high - low)

    return {
        "count": total,
        "min": float(values[0]),
        "p50": quantile(0.5),
        "p95": quantile(0.95),
        "max": float(values[-1]),
        "mean": mean,
    }


def _empty() -> dict[str, Any]:
    return {"count": 0, "min": None, "p50": None, "p95": None, "max": None, "mean": None}


def _hot_blocks(touches: pa.Table) -> dict[str, list[dict[str, int]]]:
    """Per request, its most touched prefix blocks: most touches first, then lowest id."""
    request, block, n = _columns(touches, "request_id", "block_id")
    order = np.lexsort((block, -n, request))
    hot: dict[str, list[dict[str, int]]] = {}
    for r, b, count in zip(
        request[order].tolist(), block[order].tolist(), n[order].tolist(), strict=True
    ):
        blocks = hot.setdefault(str(r), [])
        if len(blocks) < _HOT_BLOCKS:
            blocks.append({"block_id": b, "touch_count": count})
    return hot


def _column(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(), dtype=np.int64)


def _columns(table: pa.Table, *keys: str) -> tuple[np.ndarray, ...]:
    return (*(_column(table, key) for key in keys), _column(table, "n"))
