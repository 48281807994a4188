"""Which rows of a file are new records of a run, batch by batch, in bounded memory.

A table's record key (`kvtrace.warehouse.schema.core.TableSpec.record_key`) tells two
records of one run apart; a row whose key column is NULL (or NaN) is keyed by all of its
columns instead, unless the column is one of the spec's ``record_key_nullable`` (there a
NULL is a value: the key holds whether it is NULL, and the value or a zero).  A row is
left out when the run already holds its key ("stored") or the file gave it before
("repeated").

Most large files give their keys in increasing order (a Kineto trace's ``(rank,
event_idx, ts_us)``), so no key can repeat an earlier one: while that holds, the file's keys
are kept as compact sorted Arrow columns, and the run's stored keys are looked up only
in the range each batch spans (by bisection).  A file whose keys go back on themselves
switches to Python sets of every key, stored and taken, from then on.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvtrace.warehouse.schema.tables import TableSpec

Key = tuple[Any, ...]
_ROW = "__row"


@dataclass
class SortedKeys:
    """Complete keys (key columns only) in Arrow's ascending order."""

    table: pa.Table
    first: Key
    last: Key

    @classmethod
    def of(cls, keys: pa.Table) -> SortedKeys | None:
        if keys.num_rows == 0:
            return None
        ordered = keys.sort_by([(c, "ascending") for c in keys.column_names]).combine_chunks()
        return cls(ordered, _row(ordered, 0), _row(ordered, ordered.num_rows - 1))

    def between(self, low: Key, high: Key) -> set[Key]:
        """The keys from ``low`` to ``high``, both included."""
        if high < self.first or self.last < low:
            return set()
        rows = range(self.table.num_rows)
        start = bisect_left(rows, low, key=lambda i: _row(self.table, i))
        end = bisect_right(rows, high, key=lambda i: _row(self.table, i))
        return set(tuples(self.table.slice(start, end - start)))


class RecordKeys:
    """The keys one file's rows of one table are checked against: those the run holds
    (``stored``: its rows of the table, key columns alone unless some key is incomplete)
    and those the file gave so far."""

    def __init__(self, spec: TableSpec, stored: pa.Table) -> None:
        self.spec = spec
        self.key = _key_names(spec)
        loose = incomplete(stored, spec)
        self._stored = SortedKeys.of(key_columns(stored.filter(pa.array(~loose)), spec))
        self._stored_loose = set(whole_row_keys(stored.filter(pa.array(loose))))
        self._taken: list[SortedKeys] = []  # each batch's keys, above the batch before
        self._taken_loose: set[Key] = set()
        self._highest: Key | None = None
        self._sets: tuple[set[Key], set[Key]] | None = None  # (stored, taken) once unordered

    def sift(self, rows: pa.Table) -> tuple[np.ndarray, int, int]:
        """Which of ``rows`` are new records (a mask), how many the run holds already and
        how many repeat one the file gave before (earlier rows of ``rows`` included)."""
        keep = np.ones(rows.num_rows, dtype=bool)
        loose = incomplete(rows, self.spec)
        stored_hits, repeats = self._sift_loose(rows, loose, keep)
        where = np.flatnonzero(~loose)
        keys = key_columns(rows.take(pa.array(where)) if loose.any() else rows, self.spec)
        if keys.num_rows == 0:
            return keep, stored_hits, repeats
        ordered = keys.append_column(_ROW, pa.array(np.arange(keys.num_rows)))
        distinct = in_order(keys, strictly=True)  # in order already, as most files give them
        if not distinct:
            ordered = ordered.sort_by([(c, "ascending") for c in (*self.key, _ROW)])
            distinct = in_order(ordered.select(self.key), strictly=True)
        low, high = _row(ordered, 0, self.key), _row(ordered, ordered.num_rows - 1, self.key)
        if self._sets is None and self._highest is not None and low <= self._highest:
            self._sets = self._all_keys()
        if self._sets is not None:
            stored, taken = self._sets
        else:
            stored, taken = (self._stored.between(low, high) if self._stored else set()), set()
        if stored or taken or not distinct:
            for row, record in zip(where, tuples(keys), strict=True):
                if record in stored:
                    stored_hits += 1
                    keep[row] = False
                elif record in taken:
                    repeats += 1
                    keep[row] = False
                else:
                    taken.add(record)
        if self._sets is None:
            kept = ordered.filter(pa.array(keep[where][ordered[_ROW].to_numpy()]))
            if kept.num_rows:
                kept = kept.drop_columns([_ROW]).combine_chunks()
                self._taken.append(SortedKeys(kept, _row(kept, 0), _row(kept, kept.num_rows - 1)))
            self._highest = high
        return keep, stored_hits, repeats

    def gave_any_of(self, rows: pa.Table) -> bool:
        """Whether the file gave a record with the key of one of ``rows`` (a table's rows
        that another commit stored since the run's keys were read)."""
        loose = incomplete(rows, self.spec)
        if loose.any() and not self._taken_loose.isdisjoint(
            whole_row_keys(rows.filter(pa.array(loose)))
        ):
            return True
        other = SortedKeys.of(key_columns(rows.filter(pa.array(~loose)), self.spec))
        if other is None:
            return False
        if self._sets is not None:
            return not self._sets[1].isdisjoint(tuples(other.table))
        return any(
            other.between(keys.first, keys.last) & keys.between(other.first, other.last)
            for keys in self._taken
        )

    def _sift_loose(self, rows: pa.Table, loose: np.ndarray, keep: np.ndarray) -> tuple[int, int]:
        """Check the rows keyed by all their columns; returns (stored, repeated)."""
        stored_hits = repeats = 0
        if not loose.any():
            return 0, 0
        where = np.flatnonzero(loose)
        for row, record in zip(where, whole_row_keys(rows.take(pa.array(where))), strict=True):
            if record in self._stored_loose:
                stored_hits += 1
                keep[row] = False
            elif record in self._taken_loose:
                repeats += 1
                keep[row] = False
            else:
                self._taken_loose.add(record)
        return stored_hits, repeats

    def _all_keys(self) -> tuple[set[Key], set[Key]]:
        """Every stored key and every key taken so far, as sets."""
        stored = set(tuples(self._stored.table)) if self._stored else set()
        taken = {record for keys in self._taken for record in tuples(keys.table)}
        self._taken = []
        return stored, taken


def incomplete(rows: pa.Table, spec: TableSpec) -> np.ndarray:
    """Rows with a NULL (or NaN) key column: those are keyed by all of their columns."""
    mask = np.zeros(rows.num_rows, dtype=bool)
    for name in spec.record_key or ():
        if name in spec.record_key_nullable:
            continue
        column = rows[name]
        mask |= column.is_null().to_numpy(zero_copy_only=False)
        if pa.types.is_floating(column.type):
            mask |= pc.fill_null(pc.is_nan(column), False).to_numpy(zero_copy_only=False)
    return mask


def key_columns(rows: pa.Table, spec: TableSpec) -> pa.Table:
    """The key columns of complete rows; a nullable column as two: NULL or not, and the
    value with NULL read as zero."""
    columns: dict[str, pa.ChunkedArray] = {}
    for name in spec.record_key or ():
        column = rows[name]
        if name in spec.record_key_nullable:
            columns[f"{name} is null"] = column.is_null()
            zero = pa.scalar("" if pa.types.is_string(column.type) else 0, column.type)
            column = pc.fill_null(column, zero)
        columns[name] = column
    return pa.table(columns)


def _key_names(spec: TableSpec) -> tuple[str, ...]:
    return tuple(key_columns(spec.schema.empty_table(), spec).column_names)


def tuples(keys: pa.Table) -> list[Key]:
    """The rows of a table of key columns, as tuples."""
    return list(zip(*(column.to_pylist() for column in keys.columns), strict=True))


def whole_row_keys(rows: pa.Table) -> list[Key]:
    """Keys of rows with an incomplete key: all of their columns but ``run_id``."""
    whole = rows.drop_columns([c for c in ("run_id",) if c in rows.column_names]).to_pylist()
    return [("*", *(_hashable(v) for v in values.values())) for values in whole]


def _row(table: pa.Table, i: int, columns: tuple[str, ...] | None = None) -> Key:
    return tuple(table[name][i].as_py() for name in columns or table.column_names)


def in_order(rows: pa.Table, *, strictly: bool = False) -> bool:
    """Whether ``rows`` are sorted by their columns, first to last, ascending (with
    ``strictly``, no two rows alike).  A column with a null is taken as out of order."""
    if rows.num_rows < 2:
        return True
    head, tail = rows.slice(0, rows.num_rows - 1), rows.slice(1)
    above = np.zeros(rows.num_rows - 1, dtype=bool)  # decided: above
    tied = np.ones(rows.num_rows - 1, dtype=bool)  # equal in every column so far
    for name in rows.column_names:
        if rows[name].null_count:
            return False
        greater = pc.greater(tail[name], head[name]).to_numpy(zero_copy_only=False)
        equal = pc.equal(tail[name], head[name]).to_numpy(zero_copy_only=False)
        above |= tied & greater
        tied &= equal
    return bool(above.all() if strictly else (above | tied).all())


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _hashable(v)) for k, v in value.items())
    return value
