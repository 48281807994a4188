"""Whether a data file of the warehouse can be read: its footer, or every page of it.

The footer (`kvtrace check`) proves a file whole at its ends: cut short, overwritten or
not Parquet at all.  Bytes garbled inside it leave the footer readable, and only reading
every page finds them (`kvtrace check --deep`): each page is decompressed and decoded,
and where its writer stored a checksum of the page (kvtrace's own files do:
`kvtrace.warehouse.table_file`) the checksum is verified, which finds any change.  Pages
without one (the files Delta Lake's compaction writes) are damaged as far as they no
longer decode.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

# rows decoded at a time: a DSA row holds up to a few thousand positions, so a batch
# stays within tens of MB whatever the size of the file's row groups
_BATCH_ROWS = 8192


def file_problem(
    filesystem: pafs.FileSystem, path: str, rows: int | None, deep: bool = False
) -> str | None:
    """What is wrong with the Parquet file ``path`` that should hold ``rows`` rows (None:
    nothing): its footer, and with ``deep`` every page."""
    try:
        with filesystem.open_input_file(path) as handle:
            return _content_problem(
                pq.ParquetFile(handle, page_checksum_verification=True), rows, deep
            )
    except (OSError, pa.ArrowException) as exc:
        return f"is not a readable Parquet file ({_first_line(exc)})"


def _content_problem(parquet: pq.ParquetFile, rows: int | None, deep: bool) -> str | None:
    held = parquet.metadata.num_rows
    if rows is not None and held != rows:
        return f"holds {held:,} rows, not the {rows:,} its log recorded"
    if not deep:
        return None
    try:
        read = sum(batch.num_rows for batch in parquet.iter_batches(_BATCH_ROWS, use_threads=False))
    except (OSError, pa.ArrowException) as exc:
        return f"has a damaged page ({_first_line(exc)})"
    if read != held:
        return f"gives {read:,} rows, not the {held:,} its footer states"
    return None


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
