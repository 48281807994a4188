"""Read the named columns of a CSV file and check them value by value.

Shared by the CSV families (arrival traces, simulator metrics).  A file may be gzipped
and may start with a UTF-8 byte order mark.  A row with too few or too many fields goes
to the quarantine with its line number; the rest is read.  Numbers are checked in bulk:
a value that is not a number, not whole where a count is meant, or too large to be
stored exactly (beyond 2**53) gives its row a reason (`RowReasons`), never a wrapped or
rounded value.
"""

from __future__ import annotations

import csv
import gzip
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from kvtrace.errors import InputError
from kvtrace.ingest._csv_stream import BLOCK_BYTES, LONG_LINE, csv_stream, is_row_too_long
from kvtrace.ingest._lines import LineTexts, is_gzip, raw_text
from kvtrace.warehouse.rows.rejects import BadLine

EXACT_LIMIT = 2.0**53  # larger magnitudes are not stored exactly as float64 (or counted)
_INTEGER = r"^\s*[-+]?\d+(\.0*)?\s*$"
_NUMBER = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"


def csv_header(path: Path) -> list[str]:
    """The column names of a CSV file's first line (gzip and a byte order mark allowed)."""
    opener = gzip.open if is_gzip(path) else open
    try:
        with opener(path, "rt", encoding="utf-8-sig", errors="replace", newline="") as handle:
            return next(csv.reader(handle), [])
    except (OSError, EOFError, csv.Error):
        return []


@dataclass
class CsvColumns:
    """The named columns of a CSV file's well-formed rows."""

    path: Path
    table: pa.Table
    line_no: np.ndarray  # each row's line number in the file (the header is line 1)
    rejected: list[BadLine] = field(default_factory=list)  # rows of the wrong width
    _texts: LineTexts | None = field(default=None, repr=False)

    def line_text(self, line_no: int) -> str:
        """The text of line ``line_no``, for the quarantine (read a chunk at a time, the
        lines asked for in ascending order)."""
        if self._texts is None:
            self._texts = LineTexts(self.path)
        return self._texts(line_no)


def read_csv_columns(
    path: Path, columns: list[str], types: dict[str, pa.DataType] | None = None
) -> CsvColumns:
    """The named columns of a CSV file, as ``types`` when every value converts (the fast
    path a clean file takes), else every value as text, to be checked row by row; rows
    of the wrong width, the line a truncated gzip stream cut and lines too long to be
    rows are left out and listed (see `kvtrace.ingest._csv_stream`)."""
    text = {name: pa.string() for name in columns}
    whole_lines = is_gzip(path)
    if types:
        try:
            return _read(path, {**text, **types}, columns, whole_lines)
        except pa.ArrowInvalid:
            pass  # some value does not convert: read text and find which
    try:
        return _read(path, text, columns, whole_lines)
    except pa.ArrowInvalid as exc:
        raise InputError(f"{path} is not a readable CSV file: {exc}") from None


def _read(
    path: Path, types: dict[str, pa.DataType], columns: list[str], whole_lines: bool
) -> CsvColumns:
    convert = pa_csv.ConvertOptions(column_types=types, include_columns=columns)
    stream, left_out = csv_stream(path, whole_lines)
    try:
        table = pa_csv.read_csv(stream, read_options=_options(whole_lines), convert_options=convert)
    except pa.ArrowInvalid as exc:
        if is_row_too_long(exc) and not whole_lines:
            return _read(path, types, columns, whole_lines=True)
        if "Expected" not in str(exc) or "columns, got" not in str(exc):
            raise
        return _read_ragged(path, convert, whole_lines)  # a row of the wrong width: find them
    line_no = np.arange(2, table.num_rows + 2, dtype=np.int64)
    return CsvColumns(path, table, line_no, left_out)


def _options(whole_lines: bool, use_threads: bool = True) -> pa_csv.ReadOptions:
    """Arrow's read options: blocks that hold any row of whole lines, else its own."""
    if whole_lines:
        return pa_csv.ReadOptions(use_threads=use_threads, block_size=BLOCK_BYTES)
    return pa_csv.ReadOptions(use_threads=use_threads)


def _read_ragged(path: Path, convert: pa_csv.ConvertOptions, whole_lines: bool) -> CsvColumns:
    """Read on one thread, so that each row of the wrong width comes with its line."""
    bad: list[BadLine] = []
    long_lines: list[int] = []  # the lines given as LONG_LINE

    def note(row: pa_csv.InvalidRow) -> str:
        if row.text == LONG_LINE:
            long_lines.append(row.number)
            return "skip"
        bad.append(
            BadLine(
                row.number,
                f"{row.actual_columns} fields where the header has {row.expected_columns}",
                raw_text(row.text.encode()),
            )
        )
        return "skip"

    stream, left_out = csv_stream(path, whole_lines)
    try:
        table = pa_csv.read_csv(
            stream,
            read_options=_options(whole_lines, use_threads=False),
            parse_options=pa_csv.ParseOptions(invalid_row_handler=note),
            convert_options=convert,
        )
    except pa.ArrowInvalid as exc:
        if is_row_too_long(exc) and not whole_lines:
            return _read_ragged(path, convert, whole_lines=True)
        raise
    skipped = {b.line_no for b in bad} | set(long_lines)
    line_no = np.fromiter(
        (n for n in range(2, table.num_rows + len(skipped) + 2) if n not in skipped),
        dtype=np.int64,
        count=table.num_rows,
    )
    return CsvColumns(path, table, line_no, sorted(bad + left_out, key=lambda b: b.line_no))


class RowReasons:
    """Why rows are rejected: the first reason given to a row sticks."""

    def __init__(self, rows: int) -> None:
        self.codes = np.zeros(rows, dtype=np.int16)
        self.texts = [""]

    def note(self, rows: np.ndarray, reason: str) -> None:
        """Give ``rows`` (a mask) that have no reason yet this one."""
        rows = rows & (self.codes == 0)
        if rows.any():
            self.texts.append(reason)
            self.codes[rows] = len(self.texts) - 1

    @property
    def ok(self) -> np.ndarray:
        ok: np.ndarray = self.codes == 0
        return ok

    def text(self, row: int) -> str:
        return self.texts[int(self.codes[row])]


def numbers(
    column: pa.ChunkedArray, name: str, reasons: RowReasons, kind: pa.DataType
) -> np.ndarray:
    """``column`` as numbers (NaN where unusable, with a reason).

    A clean column is cast in one go; only a column that fails is matched row by row.
    Magnitudes beyond `EXACT_LIMIT` are out of range: no trace holds such a count or
    time, and they would not be stored as given.
    """
    whole = kind == pa.int64()
    if pa.types.is_integer(column.type):  # read as integers: only a missing value is bad
        values = np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)
    else:
        try:
            values = np.asarray(
                pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64
            )
        except pa.ArrowInvalid:
            pattern = _INTEGER if whole else _NUMBER
            ok = np.asarray(pc.fill_null(pc.match_substring_regex(column, pattern), False))
            values = np.full(len(ok), np.nan)
            if ok.any():
                good = pc.filter(column, pa.array(ok))
                values[ok] = pc.cast(pc.utf8_trim_whitespace(good), pa.float64()).to_numpy()
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(values) | ((values % 1 != 0) if whole else False)
        too_large = ~bad & (np.abs(values) > EXACT_LIMIT)
    reasons.note(bad, f"{name} is not a {'whole ' if whole else ''}number")
    reasons.note(too_large, f"{name} is out of range")
    return np.where(bad | too_large, np.nan, values)
