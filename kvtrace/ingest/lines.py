"""Read newline-delimited JSON in large chunks, parse each with Arrow, isolate bad lines.

A chunk is parsed in one call to Arrow's multi-threaded JSON reader.  Only when that
fails is the chunk split in halves, recursively, until every failing line stands alone;
good lines keep their data and bad ones come back with their line number and a reason.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json

from kvtrace.rejects import BadLine

CHUNK_BYTES = 8 << 20
MAX_RAW_CHARS = 1 << 16
NOT_UTF8 = "not UTF-8 text (binary data or a corrupted line)"


@dataclass
class Chunk:
    """Whole lines of a source file: ``data`` starts at line ``first_line`` (1-based)."""

    data: bytes
    first_line: int
    lines: int  # newline-terminated lines, plus one for a final unterminated line
    source_offset: int  # bytes of the source file (compressed, for .gz) read so far


@dataclass
class ParsedChunk:
    table: pa.Table
    line_numbers: np.ndarray
    bad: list[BadLine]


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(2) == b"\x1f\x8b"


def read_chunks(path: Path, chunk_bytes: int | None = None) -> Iterator[Chunk]:
    """Yield the file (plain or gzip) as chunks of whole lines, about ``chunk_bytes`` each
    (default `CHUNK_BYTES`)."""
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    line = 1
    pending = b""
    with open(path, "rb") as raw:
        source: BinaryIO = gzip.GzipFile(fileobj=raw, mode="rb") if is_gzip(path) else raw
        while True:
            block = source.read(chunk_bytes)
            if not block:
                break
            data = pending + block
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                pending = data
                continue
            pending = data[cut:]
            count = data.count(b"\n", 0, cut)
            yield Chunk(data[:cut], line, count, raw.tell())
            line += count
        if pending:
            yield Chunk(pending, line, 1, raw.tell())


def parse_chunk(chunk: Chunk, schema: pa.Schema) -> ParsedChunk:
    """Parse ``chunk`` against ``schema`` (extra fields ignored, missing ones NULL)."""
    try:
        chunk.data.decode("utf-8")  # Arrow would pass invalid UTF-8 into string columns
    except UnicodeDecodeError:
        return _parse_line_by_line(chunk, schema)
    try:
        table = _parse(chunk.data, schema)
    except pa.ArrowInvalid:
        return _parse_line_by_line(chunk, schema)
    if table.num_rows == chunk.lines:
        numbers = np.arange(chunk.first_line, chunk.first_line + chunk.lines, dtype=np.int64)
        return ParsedChunk(table, numbers, [])
    return _parse_line_by_line(chunk, schema)  # blank lines: recover the numbering


def _parse(data: bytes, schema: pa.Schema) -> pa.Table:
    options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    try:
        return pa_json.read_json(pa.BufferReader(data), parse_options=options)
    except pa.ArrowInvalid as exc:
        if "straddling" not in str(exc):
            raise
    # a record longer than Arrow's block (1 MB): blocks as long as the longest line
    longest = max(len(line) for line in data.split(b"\n")) + 1
    read = pa_json.ReadOptions(block_size=max(longest, 1 << 20))
    return pa_json.read_json(pa.BufferReader(data), read_options=read, parse_options=options)


def _parse_line_by_line(chunk: Chunk, schema: pa.Schema) -> ParsedChunk:
    lines = chunk.data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    tables: list[pa.Table] = []
    good_numbers: list[int] = []
    bad: list[BadLine] = []
    numbered = []
    for i, text in enumerate(lines):
        if not text.strip():
            continue
        try:
            text.decode("utf-8")
        except UnicodeDecodeError:
            bad.append(BadLine(chunk.first_line + i, NOT_UTF8, raw_text(text)))
            continue
        numbered.append((chunk.first_line + i, text))

    def bisect(group: list[tuple[int, bytes]]) -> None:
        if not group:
            return
        try:
            tables.append(_parse(b"\n".join(text for _, text in group) + b"\n", schema))
            good_numbers.extend(number for number, _ in group)
        except pa.ArrowInvalid as exc:
            if len(group) == 1:
                number, text = group[0]
                bad.append(BadLine(number, describe_parse_error(text, exc), raw_text(text)))
                return
            middle = len(group) // 2
            bisect(group[:middle])
            bisect(group[middle:])

    bisect(numbered)
    table = pa.concat_tables(tables) if tables else schema.empty_table()
    bad.sort(key=lambda line: line.line_no)
    return ParsedChunk(table, np.asarray(good_numbers, dtype=np.int64), bad)


def describe_parse_error(text: bytes, exc: Exception) -> str:
    """One sentence on why a single line failed to parse."""
    try:
        value = json.loads(text.decode("utf-8"))
    except UnicodeDecodeError:
        return NOT_UTF8
    except json.JSONDecodeError as json_error:
        return f"invalid JSON (truncated line?): {json_error.msg} at column {json_error.colno}"
    if not isinstance(value, dict):
        return f"expected a JSON object, got {type(value).__name__}"
    message = str(exc).replace("JSON parse error: ", "").split(" in row ")[0]
    return f"wrong type: {message}"


def raw_text(text: bytes) -> str:
    """A line as stored in the quarantine: decoded, at most MAX_RAW_CHARS bytes of it."""
    return text[:MAX_RAW_CHARS].decode("utf-8", errors="replace")
