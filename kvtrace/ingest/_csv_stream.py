"""A CSV file's content as Arrow's CSV reader is to see it.

A plain file goes to Arrow as it is (its fastest read).  A gzip file is read as whole
lines (`WholeLines`): Arrow would take the line a truncated stream cut as a row
(``…,1765,1`` of ``…,1765,16``: a wrong count stored as a right one).  So is a plain
file holding a row longer than Arrow's block (Arrow refuses the whole file for it).
Whole lines leave out the cut line, and give a line longer than `CSV_LINE_BYTES` (no
trace's row is) as `LONG_LINE`, a row of one field that the reader's check of row widths
leaves out; both are quarantine entries in the stream's ``notes``.  Arrow's blocks
(`BLOCK_BYTES`) hold any row that is left.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from kvtrace.ingest._lines import TRUNCATED_GZIP, Chunk, raw_text, read_chunks
from kvtrace.warehouse.rows.rejects import BadLine

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

CSV_LINE_BYTES = 1 << 20
BLOCK_BYTES = 2 * CSV_LINE_BYTES
LONG_LINE = "\x00(a line too long to read)\x00"


class WholeLines(io.RawIOBase):
    """The whole lines of a CSV file (plain or gzip), as a stream for Arrow's reader."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self._chunks = read_chunks(path, max_line_bytes=CSV_LINE_BYTES)
        self._ready = memoryview(b"")
        self.notes: list[BadLine] = []  # the lines left out (long ones, a cut one)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        while not self._ready:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._ready = memoryview(self._whole_lines(chunk))
        target = memoryview(buffer).cast("B")
        size = min(len(target), len(self._ready))
        target[:size] = self._ready[:size]
        self._ready = self._ready[size:]
        return size

    def _whole_lines(self, chunk: Chunk) -> bytes:
        """The chunk's lines for Arrow: a long line as `LONG_LINE`, a cut one left out."""
        data = chunk.data
        self.notes += chunk.long_lines
        if chunk.long_lines:
            lines = data.split(b"\n")
            for long_line in chunk.long_lines:
                lines[long_line.line_no - chunk.first_line] = LONG_LINE.encode()
            data = b"\n".join(lines)
        if chunk.truncated:
            complete = data.rfind(b"\n") + 1
            line = chunk.first_line + data.count(b"\n", 0, complete)
            self.notes.append(BadLine(line, TRUNCATED_GZIP, raw_text(data[complete:])))
            data = data[:complete]
        return data


def csv_stream(path: Path, whole_lines: bool) -> tuple[pa.NativeFile, list[BadLine]]:
    """An Arrow stream of ``path``: the file itself, or its `WholeLines`; and the lines
    the stream leaves out, once it has been read."""
    if not whole_lines:
        return pa.OSFile(os.fsencode(path)), []  # bytes: a name need not be UTF-8
    lines = WholeLines(path)
    return pa.PythonFile(io.BufferedReader(lines, BLOCK_BYTES), mode="r"), lines.notes


def is_row_too_long(exc: pa.ArrowInvalid) -> bool:
    """Whether Arrow refused a file for a row longer than its block."""
    return "straddling" in str(exc)
