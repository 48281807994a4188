"""Read one DSA trace file into a `DsaWriter`.

The file is read in chunks of whole lines; Arrow parses the next chunk in a background
thread while the writer validates and stores the current one.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kvtrace.ingest.dsa_formats import SCHEMAS, Format, canonical
from kvtrace.ingest.lines import Chunk, ParsedChunk, parse_chunk, raw_text, read_chunks
from kvtrace.warehouse.dsa_writer import DsaFileResult, DsaWriter


def read_dsa_file(writer: DsaWriter, path: Path, fmt: Format,
                  progress: Callable[[int], None] | None = None) -> DsaFileResult:
    """Feed every line of ``path`` to ``writer`` and finish it."""
    schema = SCHEMAS[fmt]
    with ThreadPoolExecutor(max_workers=1) as parser:
        pending = None
        for chunk in read_chunks(path):
            parsing = (chunk, parser.submit(parse_chunk, chunk, schema))
            if pending is not None:
                _consume(writer, fmt, pending[0], pending[1].result(), progress)
            pending = parsing
        if pending is not None:
            _consume(writer, fmt, pending[0], pending[1].result(), progress)
    return writer.finish()


def _consume(writer: DsaWriter, fmt: Format, chunk: Chunk, parsed: ParsedChunk,
             progress: Callable[[int], None] | None) -> None:
    writer.result.rejected.extend(parsed.bad)
    if (note := chunk.truncation_note()) is not None:
        writer.result.rejected.append(note)
    if parsed.table.num_rows:
        writer.add(canonical(parsed.table, fmt), parsed.line_numbers, _raw_lines(chunk))
    if progress:
        progress(chunk.source_offset)


def _raw_lines(chunk: Chunk) -> Callable[[int], str]:
    """A rejected line's text by line number; the chunk is split into lines on the first
    call only, since most chunks reject nothing."""
    lines: list[bytes] = []

    def raw_of(line_no: int) -> str:
        if not lines:
            lines.extend(chunk.data.split(b"\n"))
        return raw_text(lines[line_no - chunk.first_line])

    return raw_of
