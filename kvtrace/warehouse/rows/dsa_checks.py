"""Check the statistics a source precomputed against those recomputed from its positions.

Disagreements are counted per statistic, with the first example, and reported; the
stored values are always the recomputed ones.  Integer statistics must match exactly.
A percentile agrees when it lies between the two order statistics around its rank (so a
source that used another percentile method is not flagged); the offset median must be the
linear one (within rounding) or exactly one of the two middle values, so offsets off by
one are caught.  Means and ratios allow for the rounding the tracer applied when printing
them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from kvtrace.kernels.block_stats import BlockStats, OffsetStats, PositionLists, segment_bracket

__all__ = ["SourceChecks", "StatCheck", "check_source_stats"]

_MEAN_TOLERANCE = 0.051  # tokens: the tracer prints one or two decimals
_RATIO_TOLERANCE = 0.0051  # ratios printed with two or more decimals
_SLACK = 1e-6


@dataclass
class StatCheck:
    """Running tally of one statistic across a source."""

    checked: int = 0
    disagreeing: int = 0
    first_line: int | None = None
    source_value: float | None = None
    recomputed: float | None = None


@dataclass
class SourceChecks:
    """All statistics of one source file, by name."""

    stats: dict[str, StatCheck] = field(default_factory=dict)

    def add(
        self,
        name: str,
        source: np.ndarray,
        ok: np.ndarray,
        ours: np.ndarray,
        line_numbers: np.ndarray,
    ) -> None:
        present = ~np.isnan(source)
        tally = self.stats.setdefault(name, StatCheck())
        tally.checked += int(present.sum())
        wrong = np.flatnonzero(present & ~ok)
        if len(wrong) == 0:
            return
        tally.disagreeing += len(wrong)
        if tally.first_line is None:
            first = wrong[0]
            tally.first_line = int(line_numbers[first])
            tally.source_value = float(source[first])
            tally.recomputed = float(ours[first])

    def disagreements(self) -> dict[str, StatCheck]:
        return {name: tally for name, tally in self.stats.items() if tally.disagreeing}


def _values(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)


def check_source_stats(
    checks: SourceChecks,
    src: dict[str, Any],
    lists: PositionLists,
    seq_len: np.ndarray,
    blocks: BlockStats,
    offsets: OffsetStats,
    intersection: np.ndarray,
    source_block_size_known: np.ndarray,
    line_numbers: np.ndarray,
) -> None:
    """Compare each ``src_*`` column (Arrow, NULL where absent) with our statistics."""

    def exact(name: str, ours: np.ndarray, only: np.ndarray | None = None) -> None:
        source = _values(src[name])
        if only is not None:
            source = np.where(only, source, np.nan)
        checks.add(name, source, np.abs(source - ours) <= _SLACK, ours, line_numbers)

    def close(
        name: str, ours: np.ndarray, tolerance: float, only: np.ndarray | None = None
    ) -> None:
        source = _values(src[name])
        if only is not None:
            source = np.where(only, source, np.nan)
        ok = np.abs(source - ours) <= tolerance + _SLACK
        ok |= np.isnan(source) & np.isnan(ours)
        checks.add(name, source, ok, ours, line_numbers)

    def median_like(name: str, ours: np.ndarray, low: np.ndarray, high: np.ndarray) -> None:
        """The linear median within printed rounding, or exactly one of the two middle
        order statistics (the lower / higher / nearest methods).  Unlike a bracket, a
        value off by one from the linear median is caught however far apart the middle
        order statistics are."""
        source = _values(src[name])
        ok = np.abs(source - ours) <= 0.5 + _SLACK
        ok |= (np.abs(source - low) <= _SLACK) | (np.abs(source - high) <= _SLACK)
        checks.add(name, source, ok, ours, line_numbers)

    def within(
        name: str,
        ours: np.ndarray,
        low: np.ndarray,
        high: np.ndarray,
        only: np.ndarray | None = None,
    ) -> None:
        source = _values(src[name])
        if only is not None:
            source = np.where(only, source, np.nan)
        lo, hi = np.minimum(low, high), np.maximum(low, high)
        ok = (source >= lo - 0.5 - _SLACK) & (source <= hi + 0.5 + _SLACK)
        checks.add(name, source, ok, ours, line_numbers)

    last = seq_len.astype(np.float64) - 1
    starts, counts = lists.offsets[:-1], lists.lengths
    exact("src_count", counts.astype(np.float64))
    exact("src_offset_min", offsets.offset_min)
    exact("src_offset_max", offsets.offset_max)
    low, high = segment_bracket(lists.values, starts, counts, 0.5)
    median_like("src_offset_p50", offsets.offset_p50, last - low, last - high)
    low, high = segment_bracket(lists.values, starts, counts, 0.05)
    within("src_offset_p95", offsets.offset_p95, last - low, last - high)
    known = source_block_size_known
    exact("src_unique_blocks", blocks.unique_blocks.astype(np.float64), known)
    exact("src_total_blocks", blocks.total_blocks_in_use.astype(np.float64), known)
    close("src_touched_ratio", blocks.touched_block_ratio, _RATIO_TOLERANCE, known)
    close("src_tpb_mean", blocks.tokens_per_block_mean, _MEAN_TOLERANCE, known)
    for name, q, ours in (
        ("src_tpb_p50", 0.5, blocks.tokens_per_block_p50),
        ("src_tpb_p95", 0.95, blocks.tokens_per_block_p95),
    ):
        low, high = segment_bracket(
            blocks.tokens_by_row, blocks.run_offsets, blocks.unique_blocks, q
        )
        within(name, ours, low, high, known)
    close("src_intersection_ratio", intersection, _RATIO_TOLERANCE, ~np.isnan(intersection) & known)
