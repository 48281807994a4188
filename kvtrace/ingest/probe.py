"""A first look at a source file: enough of its content to tell which family reads it.

Families recognise files by what they hold, not by their names: a Chrome trace by its
``traceEvents``, a CSV arrival trace by its header, a JSONL trace by its first record.
The look is cheap: the first `HEAD_BYTES` of the (decompressed) content, and for JSONL
files the first line that holds a JSON object.
"""

from __future__ import annotations

import csv
import zlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, BinaryIO

from kvtrace.errors import InputError
from kvtrace.ingest._lines import decode_json, is_gzip, read_chunks
from kvtrace.ingest._sources import SourceFile

HEAD_BYTES = 1 << 16
FIRST_RECORD_LINES = 1000  # lines looked at for the first one that holds a JSON object
BOM = b"\xef\xbb\xbf"


@dataclass
class Probe:
    """One source file and the beginning of its content."""

    source: SourceFile
    head: bytes  # the first HEAD_BYTES of the content, decompressed, without a UTF-8 BOM

    @classmethod
    def of(cls, source: SourceFile) -> Probe:
        return cls(source, read_head(source.path))

    @property
    def path(self) -> Path:
        return self.source.path

    @property
    def is_empty(self) -> bool:
        return not self.head.strip()

    @property
    def is_json_document(self) -> bool:
        """Whether the content starts like one JSON object (or a JSONL file)."""
        return self.head.lstrip()[:1] == b"{"

    @property
    def is_json_list(self) -> bool:
        """Whether the content starts like a JSON list (no trace kvtrace reads is one)."""
        return self.head.lstrip()[:1] == b"["

    @cached_property
    def first_line(self) -> bytes:
        """The first line that holds a JSON object, else the first non-blank line."""
        first = b""
        seen = 0
        for chunk in read_chunks(self.path, chunk_bytes=HEAD_BYTES):
            for line in chunk.data.split(b"\n"):
                if not line.strip():
                    continue
                first = first or line
                if isinstance(decode_json(line.removeprefix(BOM)), dict):
                    return line.removeprefix(BOM)
                seen += 1
                if seen >= FIRST_RECORD_LINES:
                    return first.removeprefix(BOM)
        return first.removeprefix(BOM)

    @cached_property
    def first_record(self) -> dict[str, Any] | None:
        """The first line's JSON object, or None when no early line holds one."""
        value = decode_json(self.first_line)
        return value if isinstance(value, dict) else None

    @cached_property
    def csv_header(self) -> list[str]:
        """The column names of the first line, read as CSV."""
        line = self.head.split(b"\n", 1)[0].decode("utf-8", errors="replace")
        try:
            return next(csv.reader([line]), [])
        except csv.Error:  # not text (a binary file), or not CSV
            return []


def read_head(path: Path) -> bytes:
    """The first `HEAD_BYTES` of ``path``'s content (decompressed when it is gzip)."""
    try:
        with open(path, "rb") as handle:
            head = _gunzip_head(handle, path) if is_gzip(path) else handle.read(HEAD_BYTES)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    return head.removeprefix(BOM)


def _gunzip_head(handle: BinaryIO, path: Path) -> bytes:
    """Up to `HEAD_BYTES` of a gzip stream: what comes before a cut or a corrupt spot
    (the family's reader says what is wrong with the rest when it gets there); corrupt
    data before any content is an `InputError`."""
    decompressor = zlib.decompressobj(wbits=31)
    head = b""
    while len(head) < HEAD_BYTES and (compressed := handle.read(HEAD_BYTES)):
        while compressed and len(head) < HEAD_BYTES:
            if decompressor.eof:  # the next member of a multi-member file
                decompressor = zlib.decompressobj(wbits=31)
            try:
                head += decompressor.decompress(compressed, HEAD_BYTES - len(head))
            except zlib.error as exc:
                if not head:
                    raise InputError(f"{path}: corrupt gzip data ({exc})") from None
                return head
            compressed = decompressor.unconsumed_tail or decompressor.unused_data
    return head


__all__ = ["HEAD_BYTES", "Probe", "read_head"]
