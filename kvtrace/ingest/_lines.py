"""Read newline-delimited JSON in large chunks, parse each with Arrow, isolate bad lines.

A chunk is parsed in one call to Arrow's multi-threaded JSON reader.  Only when that
fails is the chunk split in halves, recursively, until every failing line stands alone;
good lines keep their data and bad ones come back with their line number and a reason.
A line longer than `MAX_LINE_BYTES` is passed over a block at a time and quarantined.
A family whose lines are mostly long integer arrays (DSA traces) has them read by a
compiled pass first (`IntLists`), and Arrow parses only the rest; one whose records hold
integers and integer arrays alone (Mooncake's arrival traces) can have whole chunks read
by a compiled pass (`IntRecords`).

Arrow's reader is only ever handed lines that start with ``{``: with an explicit
schema it crashes the process on a block that starts with ``null``, and it turns a
``null`` elsewhere into a row of NULLs.  A chunk whose every line starts with ``{`` (the
usual case, checked with one pass over its line breaks) goes to Arrow whole; otherwise
each line that is not a JSON object goes to the quarantine before any parsing.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json

from kvtrace.errors import InputError
from kvtrace.warehouse.rows.rejects import BadLine

CHUNK_BYTES = 4 << 20
# A line longer than this is no trace's record (a DSA record of a million positions
# takes a few MB): it is left out, quarantined, without being held in memory
MAX_LINE_BYTES = 256 << 20
MAX_RAW_CHARS = 1 << 16
NOT_UTF8 = "not UTF-8 text (binary data or a corrupted line)"
NESTED_TOO_DEEPLY = "nested too deeply to read (more levels than any trace record has)"
TRUNCATED_GZIP = (
    "the gzip stream ends early (a truncated file): the complete lines before were kept"
)


@dataclass
class Chunk:
    """Whole lines of a source file: ``data`` starts at line ``first_line`` (1-based)."""

    data: bytes
    first_line: int
    lines: int  # newline-terminated lines, plus one for a final unterminated line
    source_offset: int  # bytes of the source file (compressed, for .gz) read so far
    truncated: bool = False  # the last chunk of a gzip stream that ends early
    long_lines: list[BadLine] = field(default_factory=list)  # left out: empty in ``data``
    _split: list[bytes] = field(default_factory=list, repr=False, compare=False)

    def line_text(self, line_no: int) -> str:
        """The text of line ``line_no`` of this chunk, for the quarantine (the chunk is
        split into lines on the first call only: most chunks reject nothing)."""
        if not self._split:
            self._split = self.data.split(b"\n")
        return raw_text(self._split[line_no - self.first_line])

    def truncation_note(self) -> BadLine | None:
        """A quarantine entry saying the file ends early, for the last chunk of one."""
        if not self.truncated:
            return None
        return BadLine(self.first_line + self.lines, TRUNCATED_GZIP, "")

    def notes(self) -> list[BadLine]:
        """The chunk's quarantine entries that no parser finds: the lines left out for
        their length, and the note of a file that ends early."""
        note = self.truncation_note()
        return self.long_lines + ([note] if note else [])


@dataclass
class ParsedChunk:
    table: pa.Table
    line_numbers: np.ndarray
    bad: list[BadLine]


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(2) == b"\x1f\x8b"


def read_content(path: Path) -> bytes:
    """A whole (small) file's content, decompressed when it is gzip."""
    if not is_gzip(path):
        return path.read_bytes()
    try:
        return gzip.decompress(path.read_bytes())
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{path}: corrupt gzip data ({exc})") from None


def read_chunks(
    path: Path, chunk_bytes: int | None = None, max_line_bytes: int | None = None
) -> Iterator[Chunk]:
    """Yield the file (plain or gzip) as chunks of whole lines, about ``chunk_bytes`` each
    (default `CHUNK_BYTES`).

    A line longer than ``max_line_bytes`` (default `MAX_LINE_BYTES`) is passed over a
    block at a time (never held whole): it stays in its chunk as an empty line, and its
    number and first bytes are in the chunk's ``long_lines``.  A gzip stream that ends
    early yields everything before the cut, its last chunk marked ``truncated``; corrupt
    gzip data is an `InputError` naming the file.
    """
    limit = max_line_bytes or MAX_LINE_BYTES
    block_bytes = min(chunk_bytes or CHUNK_BYTES, limit)  # a line inside a block is short
    lines = _LineSplitter(limit)
    with open(path, "rb") as raw:
        blocks = (
            _gunzip(raw, block_bytes, path)
            if is_gzip(path)
            else iter(lambda: raw.read(block_bytes), b"")
        )
        truncated = False
        for block in blocks:
            if block is _TRUNCATED:
                truncated = True
                break
            if (chunk := lines.take(block, raw.tell())) is not None:
                yield chunk
        if (chunk := lines.rest(raw.tell(), truncated)) is not None:
            yield chunk


class _LineSplitter:
    """Cuts a stream of blocks into chunks of whole lines, numbering them, and passes
    over lines longer than ``limit`` bytes without keeping more than ``limit`` of one."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.line = 1  # the number of the next chunk's first line
        self.pending = bytearray()  # the start of a line the next block continues
        self.skipping = False  # inside a line too long to keep, until its newline
        self.long_lines: list[BadLine] = []  # left out since the last chunk

    def take(self, block: bytes, offset: int) -> Chunk | None:
        """The whole lines that ``block`` completes, or None while they continue."""
        if self.skipping:
            end = block.find(b"\n")
            if end < 0:
                return None
            self.skipping = False
            block = block[end:]  # the long line's place: an empty line
        cut = block.rfind(b"\n") + 1
        if cut == 0:
            self.pending += block
            if len(self.pending) > self.limit:
                self._leave_out(bytes(self.pending[:MAX_RAW_CHARS]))
                self.pending.clear()
                self.skipping = True
            return None
        head = block[: block.find(b"\n")]
        if len(self.pending) + len(head) > self.limit:  # a line begun in earlier blocks
            self._leave_out(bytes(self.pending[:MAX_RAW_CHARS]) + head[:MAX_RAW_CHARS])
            self.pending.clear()
            block, cut = block[len(head) :], cut - len(head)
        data = bytes(self.pending) + block[:cut] if self.pending else block[:cut]
        self.pending = bytearray(block[cut:])
        count = data.count(b"\n")
        chunk = Chunk(data, self.line, count, offset, long_lines=self.long_lines)
        self.line += count
        self.long_lines = []
        return chunk

    def rest(self, offset: int, truncated: bool) -> Chunk | None:
        """The chunk of what follows the last newline, if anything does."""
        unterminated = bool(self.pending) or self.skipping
        if not (unterminated or truncated or self.long_lines):
            return None
        lines = 1 if unterminated else 0
        return Chunk(bytes(self.pending), self.line, lines, offset, truncated, self.long_lines)

    def _leave_out(self, start: bytes) -> None:
        reason = f"line longer than {_size(self.limit)}: left out, the lines after it read"
        self.long_lines.append(BadLine(self.line, reason, raw_text(start)))


def _size(count: int) -> str:
    """A byte count as people write it: 256 MiB, 64 KiB, 1000 bytes."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift and count % (1 << shift) == 0:
            return f"{count >> shift} {unit}"
    return f"{count:,} bytes"


_TRUNCATED = b"<truncated>"


def _gunzip(raw: BinaryIO, size: int, path: Path) -> Iterator[bytes]:
    """Decompressed blocks of at most ``size`` bytes of a (multi-member) gzip file;
    `_TRUNCATED` when it ends early."""
    decompressor = zlib.decompressobj(wbits=31)
    while True:
        compressed = raw.read(size)
        if not compressed:
            if not decompressor.eof:
                yield decompressor.flush()
                yield _TRUNCATED
            return
        while compressed:
            if decompressor.eof:  # the next member of the file
                decompressor = zlib.decompressobj(wbits=31)
            try:
                yield decompressor.decompress(compressed, size)
            except zlib.error as exc:
                raise InputError(f"{path}: corrupt gzip data ({exc})") from None
            compressed = decompressor.unconsumed_tail or decompressor.unused_data


class LineTexts:
    """The text of a file's lines by number, for the quarantine, reading one chunk at a
    time: lines asked for in ascending order (as rejected rows are) read the file once;
    an earlier line than the last reads it again from the start."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._chunks: Iterator[Chunk] = iter(())
        self._chunk: Chunk | None = None

    def __call__(self, line_no: int) -> str:
        if self._chunk is None or line_no < self._chunk.first_line:
            self._chunks = read_chunks(self.path)
            self._chunk = next(self._chunks, None)
        while self._chunk is not None and line_no >= self._chunk.first_line + self._chunk.lines:
            self._chunk = next(self._chunks, None)
        return "" if self._chunk is None else self._chunk.line_text(line_no)


def read_json_document(path: Path) -> dict[str, Any]:
    """The one JSON object a file holds; `InputError` when it holds something else."""
    try:
        document = json.loads(read_content(path))
    except RecursionError:
        raise InputError(f"{path} is nested too deeply to read") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise InputError(f"{path} holds no JSON object")
    return document


def decode_json(text: bytes) -> object:
    """``text`` decoded as JSON, or None when it is not JSON (or nested too deeply)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def json_records(
    path: Path, rejected: list[BadLine], progress: Callable[[int], None] | None = None
) -> Iterator[tuple[int, bytes, object]]:
    """Every non-blank line of a JSONL file, decoded, as (line number, text, value).

    For small files read line by line.  A line that is not UTF-8 or not JSON, and the
    note of a gzip stream cut short, go to ``rejected``; ``progress`` gets the source
    bytes read after each chunk.
    """
    for chunk in read_chunks(path):
        for offset, text in enumerate(chunk.data.split(b"\n")):
            if not text.strip():
                continue
            line_no = chunk.first_line + offset
            try:
                value = json.loads(text)
            except UnicodeDecodeError:
                rejected.append(BadLine(line_no, NOT_UTF8, raw_text(text)))
                continue
            except RecursionError:
                rejected.append(BadLine(line_no, NESTED_TOO_DEEPLY, raw_text(text)))
                continue
            except ValueError as exc:
                reason = f"invalid JSON (truncated line?): {exc}"
                rejected.append(BadLine(line_no, reason, raw_text(text)))
                continue
            yield line_no, text, value
        rejected.extend(chunk.notes())
        if progress:
            progress(chunk.source_offset)


@dataclass(frozen=True)
class IntLists:
    """Top-level integer arrays that `parse_chunk` reads itself (see
    `kvtrace.kernels.json_lists`): ``lift`` into their schema columns, ``drop`` (fields
    the schema ignores) checked and discarded."""

    lift: tuple[str, ...]
    drop: tuple[str, ...] = ()


@dataclass(frozen=True)
class IntRecords:
    """Records of integer fields (``scalars``) and integer-array fields (``lists``) alone,
    which `parse_chunk` reads with a compiled pass (see `kvtrace.kernels.json_records`)
    when every line of a chunk is of that plain shape."""

    scalars: tuple[str, ...]
    lists: tuple[str, ...] = ()


def parse_chunk(
    chunk: Chunk,
    schema: pa.Schema,
    int_lists: IntLists | None = None,
    int_records: IntRecords | None = None,
) -> ParsedChunk:
    """Parse ``chunk`` against ``schema`` (extra fields ignored, missing ones NULL).

    With ``int_records``, a chunk whose every line is such a record is read by a
    compiled pass alone; with ``int_lists``, those arrays are read by a compiled pass and
    Arrow parses the rest.  A chunk a pass does not take whole is parsed by Arrow alone.
    The chunk's lines left out for their length are among the bad lines.
    """
    if not chunk.data or chunk.data.isspace():  # (strip() would copy the chunk)
        return ParsedChunk(schema.empty_table(), np.zeros(0, dtype=np.int64), chunk.long_lines)
    if chunk.long_lines:  # a rare chunk: the empty places of its long lines kept apart
        parsed = _parse_line_by_line(chunk, schema)
        parsed.bad = sorted(parsed.bad + chunk.long_lines, key=lambda line: line.line_no)
        return parsed
    if int_records and (table := _parse_int_records(chunk, schema, int_records)) is not None:
        numbers = np.arange(chunk.first_line, chunk.first_line + chunk.lines, dtype=np.int64)
        return ParsedChunk(table, numbers, [])
    try:
        chunk.data.decode("utf-8")  # Arrow would pass invalid UTF-8 into string columns
    except UnicodeDecodeError:
        return _parse_line_by_line(chunk, schema)
    if not _every_line_an_object(chunk):
        return _parse_line_by_line(chunk, schema)
    table = _parse_lifted(chunk, schema, int_lists) if int_lists else None
    if table is None:
        try:
            table = _parse(chunk.data, schema)
        except pa.ArrowInvalid:
            return _parse_line_by_line(chunk, schema)
    if table.num_rows == chunk.lines:
        numbers = np.arange(chunk.first_line, chunk.first_line + chunk.lines, dtype=np.int64)
        return ParsedChunk(table, numbers, [])
    return _parse_line_by_line(chunk, schema)  # blank lines: recover the numbering


def _parse_lifted(chunk: Chunk, schema: pa.Schema, int_lists: IntLists) -> pa.Table | None:
    """The chunk's table, its integer arrays read by `lift_int_lists`; None when that
    pass or Arrow does not take the chunk whole (the caller then parses it as before)."""
    from kvtrace.kernels.json_lists import lift_int_lists

    data, keys, key_lengths, commas = _kernel_inputs(chunk, int_lists.lift + int_lists.drop)
    handled, rest, rest_length, values, offsets, present = lift_int_lists(
        data, chunk.lines, keys, key_lengths, len(int_lists.lift), commas
    )
    if not handled:
        return None
    try:
        table = _parse(rest[:rest_length].tobytes(), schema)
    except pa.ArrowInvalid:
        return None
    if table.num_rows != chunk.lines:
        return None
    for k, name in enumerate(int_lists.lift):
        column = _list_column(offsets[k], values[k], schema.field(name).type, ~present[k])
        table = table.set_column(table.schema.get_field_index(name), name, column)
    return table


def _parse_int_records(chunk: Chunk, schema: pa.Schema, fields: IntRecords) -> pa.Table | None:
    """The chunk's table read by `read_int_records` (its lines then hold ASCII alone), the
    schema's other fields NULL; None when that pass does not take the chunk whole."""
    from kvtrace.kernels.json_records import read_int_records

    data, keys, key_lengths, commas = _kernel_inputs(chunk, fields.scalars + fields.lists)
    handled, scalars, values, offsets = read_int_records(
        data, chunk.lines, keys, key_lengths, len(fields.scalars), commas
    )
    if not handled:
        return None
    columns: dict[str, pa.Array] = {}
    for k, name in enumerate(fields.scalars):  # an integer converts exactly, or rounded
        # to the nearest double as a JSON reader rounds the same digits
        kind = schema.field(name).type
        numbers = scalars[k].astype(np.float64) if pa.types.is_floating(kind) else scalars[k]
        columns[name] = pa.array(numbers, type=kind)
    for a, name in enumerate(fields.lists):
        columns[name] = _list_column(offsets[a], values[a], schema.field(name).type)
    return pa.table(
        [columns.get(f.name, pa.nulls(chunk.lines, f.type)) for f in schema], schema=schema
    )


def _kernel_inputs(
    chunk: Chunk, names: tuple[str, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """What the compiled passes take: the chunk's bytes, the ``names`` as a key table and
    their lengths, and the chunk's commas (which bound its integers)."""
    from kvtrace.kernels.json_lists import key_table

    keys, key_lengths = key_table([name.encode() for name in names])
    data = np.frombuffer(chunk.data, dtype=np.uint8)
    return data, keys, key_lengths, _count_byte(data, ord(","))


def _count_byte(data: np.ndarray, byte: int, step: int = 4 << 20) -> int:
    """How many times ``byte`` occurs in ``data``, NumPy comparing a slice at a time
    (a small scratch buffer) without holding the GIL.  ``bytes.count`` holds it, which
    stalled the thread that checks the previous chunk, and takes five times as long on
    a DSA trace's position lists."""
    return sum(
        int(np.count_nonzero(data[start : start + step] == byte))
        for start in range(0, len(data), step)
    )


def _list_column(
    offsets: np.ndarray, values: np.ndarray, kind: pa.DataType, absent: np.ndarray | None = None
) -> pa.Array:
    """A list column of a compiled pass's ``values`` at ``offsets`` (NULL where
    ``absent``)."""
    return pa.ListArray.from_arrays(
        pa.array(offsets.astype(np.int32)),
        pa.array(values[: offsets[-1]]),  # a view: the buffer is 1-2x its size
        type=kind,
        mask=None if absent is None else pa.array(absent),
    )


def _every_line_an_object(chunk: Chunk) -> bool:
    """Whether every line of ``chunk`` starts with ``{`` (no blank lines either)."""
    data = np.frombuffer(chunk.data, dtype=np.uint8)
    if data[:1].tobytes() != b"{":
        return False
    breaks = np.flatnonzero(data[:-1] == ord("\n"))  # (twice as fast as counting b"\n{")
    return len(breaks) == chunk.lines - 1 and bool((data[breaks + 1] == ord("{")).all())


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
        if text.lstrip()[:1] != b"{":  # never for Arrow: see the module's docstring
            bad.append(
                BadLine(chunk.first_line + i, describe_parse_error(text, None), raw_text(text))
            )
            continue
        numbered.append((chunk.first_line + i, text.lstrip()))

    def bisect(group: list[tuple[int, bytes]]) -> None:
        if not group:
            return
        try:
            table = _parse(b"\n".join(text for _, text in group) + b"\n", schema)
            if table.num_rows != len(group):  # a line that holds more than one value
                raise pa.ArrowInvalid("more than one JSON value on the line")
            tables.append(table)
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


def describe_parse_error(text: bytes, exc: Exception | None) -> str:
    """One sentence on why a single line failed to parse (``exc``: Arrow's complaint
    about a line that is a JSON object)."""
    try:
        value = json.loads(text.decode("utf-8"))
    except UnicodeDecodeError:
        return NOT_UTF8
    except RecursionError:
        return NESTED_TOO_DEEPLY
    except json.JSONDecodeError as json_error:
        if json_error.msg == "Extra data":
            return "more than one JSON value on the line"
        return f"invalid JSON (truncated line?): {json_error.msg} at column {json_error.colno}"
    if not isinstance(value, dict):
        return f"expected a JSON object, got {json_type(value)}"
    if (huge := _integer_beyond_int64(value)) is not None:
        return f"{huge[0]} is out of range: {huge[1]}"[:300]
    message = str(exc).replace("JSON parse error: ", "").split(" in row ")[0]
    return f"wrong type: {message}"


def _integer_beyond_int64(value: object, path: str = "") -> tuple[str, int] | None:
    """The first field (as a path) holding an integer no int64 holds, and the integer."""
    if isinstance(value, dict):
        items: list[tuple[str, object]] = [
            (f"{path}.{k}" if path else str(k), v) for k, v in value.items()
        ]
    elif isinstance(value, list):
        items = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
    elif isinstance(value, int) and not isinstance(value, bool) and not (-(2**63) <= value < 2**63):
        return path, value
    else:
        return None
    for name, item in items:
        if (found := _integer_beyond_int64(item, name)) is not None:
            return found
    return None


def json_type(value: object) -> str:
    """The JSON name of a decoded value's type: null, boolean, number, string, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def raw_text(text: bytes) -> str:
    """A line as stored in the quarantine: decoded, at most MAX_RAW_CHARS bytes of it."""
    return text[:MAX_RAW_CHARS].decode("utf-8", errors="replace")
