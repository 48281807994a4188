"""What commands share to print: progress, spinners, formats, SQL answers, output files."""

from __future__ import annotations

import shutil
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from kvtrace.analysis import open_analysis_connection
from kvtrace.cli import _app
from kvtrace.cli._app import err
from kvtrace.defaults import OUTPUT_FORMATS, OutputFormat
from kvtrace.errors import KvtraceError, QueryError

if TYPE_CHECKING:  # the heavy modules load inside the commands that need them
    import duckdb
    import pyarrow as pa

    from kvtrace.warehouse import Warehouse


def _shows_progress() -> bool:
    """Whether progress is drawn: on a terminal, not with --quiet."""
    return not _app.options.quiet and err.is_terminal


def _with_progress(label: str, work):
    if not _shows_progress():
        return work(None)
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=err.console, transient=True) as bar:
        task = bar.add_task(label, total=None)
        return work(lambda done, total: bar.update(task, completed=done, total=total))


@contextmanager
def _busy(what: str):
    """A spinner on a terminal (not with --quiet)."""
    if not _shows_progress():
        yield
        return
    with err.status(what + " ..."):
        yield


def _check_output(output: Path | None, warehouse: Warehouse) -> None:
    """Refuse an ``--output`` file that would land inside a local warehouse, before any
    work is done."""
    if output is not None and warehouse.root is not None:
        from kvtrace.sql.query import check_output_path

        check_output_path(output, warehouse.root)


def _answer(
    warehouse: Warehouse,
    text: str,
    fmt: OutputFormat,
    output: Path | None,
    no_external_access: bool = False,
    memory_limit: str | None = None,
) -> None:
    """Run the read-only SQL ``text`` against ``warehouse`` and write its rows in ``fmt``
    to ``output`` (standard output when None), within ``memory_limit``."""
    from kvtrace.sql.interrupt import interruptible
    from kvtrace.sql.query import atomic_output, restrict_to, run_query, write_stream

    def opened(for_sql: str | None) -> duckdb.DuckDBPyConnection:
        con = open_analysis_connection(warehouse, for_sql=for_sql, memory_limit=memory_limit)
        if no_external_access:
            restrict_to(con, warehouse.location)
        return con

    con = opened(text)  # only what the SQL names: a quick start
    try:
        try:
            with interruptible(con):
                result = run_query(con, text, fmt)
        except QueryError:  # a name bound only at run time, or a real error: say it in full
            con.close()
            con = opened(None)
            with interruptible(con):
                result = run_query(con, text, fmt)
        with interruptible(con):
            if output is None:
                write_stream(result, fmt, sys.stdout.buffer, _width(None))
                sys.stdout.flush()
            else:
                with atomic_output(output) as sink:
                    write_stream(result, fmt, sink)
                err.say(f"wrote {output}")
    except _duckdb_error() as exc:  # raised while streaming rows
        from kvtrace.sql.query import query_error

        raise query_error(exc) from None
    finally:
        con.close()


def _duckdb_error() -> type[duckdb.Error]:
    import duckdb

    return duckdb.Error


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise KvtraceError(f"cannot read {path}: {exc.strerror}") from None


_SUFFIX_FORMATS = {".csv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def _output_format(fmt: str | None, output: Path | None) -> OutputFormat:
    """``--format``, else what the output file's suffix names, else a table."""
    if fmt is None:
        fmt = _SUFFIX_FORMATS.get(output.suffix.lower(), "table") if output else "table"
    if fmt not in OUTPUT_FORMATS:
        raise KvtraceError(f"expected one of {', '.join(OUTPUT_FORMATS)} for --format, got {fmt!r}")
    if fmt == "parquet" and output is None:
        raise KvtraceError("--format parquet needs --output FILE")
    return fmt  # type: ignore[return-value]


def _width(output: Path | None) -> int | None:
    """How wide a table may print: the terminal's width when it goes to one."""
    if output is not None or not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size().columns


def _emit_table(table: pa.Table, fmt: OutputFormat, output: Path | None) -> None:
    """Write ``table`` in ``fmt`` to ``output`` (standard output when None)."""
    from kvtrace.sql.query import render

    _emit(render(table, fmt, _width(output)), output)


def _emit(data: bytes, output: Path | None) -> None:
    if output is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        from kvtrace.sql.query import write_output

        write_output(data, output)
        err.say(f"wrote {output}")
