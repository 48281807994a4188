"""The DSA writer's histograms: offsets and block fills per (dataset, block size).

Every batch of ``dsa_steps`` rows adds its counts of position offsets
(``seq_len - 1 - position``, table ``dsa_offset_hist``) and of tokens per touched block
(``dsa_fill_hist``); the counts are folded as rows are flushed and written once, when the
writer finishes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvtrace.kernels import block_stats
from kvtrace.kernels.block_stats import PositionLists
from kvtrace.warehouse import Commit, Warehouse
from kvtrace.warehouse.rows._dsa_arrays import combined, partitions

__all__ = ["DsaHistograms"]

_DENSE_BINS = 1 << 24


@dataclass
class DsaHistograms:
    """The offset and fill counts of the rows a writer has taken so far."""

    offsets: list[pa.Table] = field(default_factory=list)
    fills: list[pa.Table] = field(default_factory=list)

    def add(
        self,
        table: pa.Table,
        lists: PositionLists,
        seq_len: np.ndarray,
        blocks: block_stats.BlockStats,
    ) -> None:
        """Count the positions and block fills of a batch of ``dsa_steps`` rows: the
        all-heads rows only, as the ``dsa_steps`` view shows (a KV group's own selection,
        beside its layer's, would count the layer's positions again)."""
        groups = _RowGroups.of(table)
        kept = table["kv_group"].is_null().to_numpy(zero_copy_only=False)
        if kept.all():
            self.offsets.append(_offset_histogram(groups, lists, seq_len))
            self.fills.append(_histogram(groups, blocks.run_rows, blocks.run_tokens, "tokens"))
            return
        rows = lists.row_ids()
        offset = np.repeat(seq_len - 1, lists.lengths) - lists.values
        of_kept = kept[rows]
        self.offsets.append(_histogram(groups, rows[of_kept], offset[of_kept], "offset"))
        runs = kept[blocks.run_rows]
        self.fills.append(
            _histogram(groups, blocks.run_rows[runs], blocks.run_tokens[runs], "tokens")
        )

    def fold(self) -> None:
        """Sum the counts gathered so far into one table each (memory stays bounded)."""
        self.offsets = [_merged_histogram(self.offsets, "offset")]
        self.fills = [_merged_histogram(self.fills, "tokens")]

    def write(self, warehouse: Warehouse, commit: Commit) -> None:
        """Write both histograms into ``commit``, a sorted file per partition."""
        for name, parts, value in (
            ("dsa_offset_hist", self.offsets, "offset"),
            ("dsa_fill_hist", self.fills, "tokens"),
        ):
            if not parts:
                continue
            merged = _merged_histogram(parts, value)
            merged = merged.append_column(
                "run_id", pa.array([commit.run_id] * merged.num_rows, pa.string())
            )
            for part in partitions(merged):
                part = part.sort_by(value)
                warehouse.write(commit, name, part)


@dataclass
class _RowGroups:
    """The (dataset, block size) group of each row of a batch: the histograms' keys."""

    datasets: pa.Array  # the batch's distinct datasets
    groups: np.ndarray  # each group's key: dataset index << 32 | block size, ascending
    group_of_row: np.ndarray

    @staticmethod
    def of(table: pa.Table) -> _RowGroups:
        dataset = pc.dictionary_encode(combined(table["dataset"]))
        row_key = (dataset.indices.to_numpy().astype(np.int64) << 32) | table[
            "block_size"
        ].to_numpy().astype(np.int64)
        groups, group_of_row = np.unique(row_key, return_inverse=True)
        return _RowGroups(dataset.dictionary, groups, group_of_row)

    def table(self, key: np.ndarray, counts: np.ndarray, width: int, name: str) -> pa.Table:
        """The histogram rows: ``key`` is group * ``width`` + value, with its count."""
        group = self.groups[key // width]
        return pa.table(
            {
                "dataset": self.datasets.take(pa.array(group >> 32)),
                "block_size": pa.array(group & 0xFFFFFFFF, pa.int32()),
                name: pa.array(key % width, pa.int32()),
                "n": pa.array(counts, pa.int64()),
            }
        )


def _histogram(
    groups: _RowGroups, value_rows: np.ndarray, values: np.ndarray, name: str
) -> pa.Table:
    """Counts of ``values`` per (dataset, block size); ``value_rows`` maps values to rows."""
    width = int(values.max()) + 1 if len(values) else 1
    # The usual batch holds one dataset at one block size: the values are the keys.
    key = (
        values
        if len(groups.groups) == 1
        else (groups.group_of_row[value_rows] * width + values.astype(np.int64))
    )
    if len(groups.groups) * width <= _DENSE_BINS:
        counts = np.bincount(key, minlength=len(groups.groups) * width)
        key = np.flatnonzero(counts)
        counts = counts[key]
    else:
        key, counts = np.unique(key, return_counts=True)
    return groups.table(key, counts, width, name)


def _offset_histogram(groups: _RowGroups, lists: PositionLists, seq_len: np.ndarray) -> pa.Table:
    """Counts of every position's offset (``seq_len - 1 - position``) per (dataset, block
    size): a batch of one group, the usual one, is counted in one compiled pass."""
    if len(groups.groups) == 1 and len(lists.values):
        from kvtrace.kernels.offset_counts import offset_counts

        counts = offset_counts(lists.values, lists.offsets, np.asarray(seq_len, np.int64))
        key = np.flatnonzero(counts)
        return groups.table(key, counts[key], len(counts), "offset")
    offset = np.repeat(seq_len - 1, lists.lengths) - lists.values
    return _histogram(groups, lists.row_ids(), offset, "offset")


def _merged_histogram(parts: list[pa.Table], value: str) -> pa.Table:
    """Several histogram tables summed into one (counts per dataset, block size, value)."""
    merged = (
        pa.concat_tables(parts).group_by(["dataset", "block_size", value]).aggregate([("n", "sum")])
    )
    return merged.rename_columns({"n_sum": "n"}).select(["dataset", "block_size", value, "n"])
