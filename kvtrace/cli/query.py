"""The commands that read the warehouse: ``sql``, ``views``, ``summary``, ``shell-init``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from kvtrace.cli._app import _executor, _open, app, out
from kvtrace.cli._options import AddressOption, AsOfOption, EngineOption, FormatOption, OutputOption
from kvtrace.cli._output import _answer, _busy, _check_output, _emit, _output_format, _read_text
from kvtrace.errors import KvtraceError


@app.command()
def sql(
    query: Annotated[
        str | None,
        typer.Argument(
            help="SQL to run (SELECT only); - or none with a pipe: read it from standard input."
        ),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option("--file", help="Read the SQL from a file (-: standard input)."),
    ] = None,
    fmt: FormatOption = None,
    output: OutputOption = None,
    no_external_access: Annotated[
        bool,
        typer.Option(
            "--no-external-access",
            help="Read no file outside the warehouse and change no setting: for SQL that "
            "someone else wrote.",
        ),
    ] = False,
    as_of: AsOfOption = None,
    memory_limit: Annotated[
        str | None,
        typer.Option(
            help="Memory the query may use, as 8GB, 512MiB or 25% [default: half the "
            "memory]; it may spill twice that to a temporary folder.",
        ),
    ] = None,
) -> None:
    """Run read-only SQL against the warehouse's views.

    Statements separated by ';' run in turn; the last one's rows are printed. The table
    format shows the first 1,000 rows; csv, json and parquet stream every row. Ctrl-C
    and SIGTERM stop a running query.

    Example: kvtrace sql "SELECT layer_id, unique_blocks_mean FROM dsa_layer_profile"
    """
    text = _sql_text(query, file)
    fmt = _output_format(fmt, output)
    warehouse = _open(as_of=as_of)
    _check_output(output, warehouse)
    _answer(warehouse, text, fmt, output, no_external_access, memory_limit)


def _sql_text(query: str | None, file: Path | None) -> str:
    """The SQL of ``kvtrace sql``: the argument, the file, or standard input (``-``, or
    no argument while standard input is a pipe or a file, as duckdb's shell reads it)."""
    if query is not None and file is not None:
        raise KvtraceError("give the SQL either as an argument or with --file, not both")
    if query == "-" or (file is not None and str(file) == "-"):
        text = _read_stdin()
    elif query is not None:
        text = query
    elif file is not None:
        text = _read_text(file)
    else:
        text = _read_stdin() if _stdin_is_piped() else ""
    if not text.strip():
        raise KvtraceError(
            'no SQL given: kvtrace sql "SELECT ...", kvtrace sql --file QUERY.sql, or the SQL '
            'piped in (echo "SELECT ..." | kvtrace sql)'
        )
    return text


def _stdin_is_piped() -> bool:
    """Whether standard input is a pipe or a file to read, not a terminal."""
    stdin = sys.stdin
    return stdin is not None and not stdin.isatty() and stdin.readable()


def _read_stdin() -> str:
    try:
        return sys.stdin.read()
    except UnicodeDecodeError:
        raise KvtraceError("the SQL on standard input is not UTF-8 text") from None


@app.command()
def views(
    pattern: Annotated[
        str | None,
        typer.Argument(
            metavar="[PATTERN]",
            help="Only objects whose name or family (the SQL file: dsa, timeline, ...) "
            "holds this text; * and ? match as in file names.",
        ),
    ] = None,
    columns: Annotated[
        bool, typer.Option("--columns", help="Each object's columns, described.")
    ] = False,
) -> None:
    """List the views and macros, one a line with what it answers.

    Example: kvtrace views timeline --columns
    """
    from kvtrace.sql import catalog

    chosen = [
        obj
        for obj in catalog.documented_objects()
        if obj.public and (pattern is None or _names_match(pattern, obj.name, obj.file))
    ]
    if not chosen:
        raise KvtraceError(f"no view or macro matches {pattern!r}; kvtrace views lists them all")
    width = min(max(len(obj.signature) for obj in chosen), 36)  # longer ones push on
    for obj in chosen:
        if not columns:
            line = f"{obj.signature:<{width}}  {obj.kind:<5}  {_first_sentence(obj.description)}"
            out.print(line, markup=False, highlight=False, no_wrap=True, crop=out.is_terminal)
            continue
        out.print(f"[bold]{obj.signature}[/bold]  ({obj.kind}, {obj.file})")
        out.print(f"  {obj.description}", markup=False)
        if obj.aliases:
            out.print(f"  (former name {', '.join(obj.aliases)}: kept for one release)")
        for column, text in obj.columns.items():
            out.print(f"    {column:<28} {text}", markup=False)
        out.print()


def _names_match(pattern: str, name: str, file: str) -> bool:
    """Whether an object of ``file`` called ``name`` is one ``pattern`` asks for."""
    import fnmatch

    family = file.removesuffix(".sql")
    pattern = pattern.lower()
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatch(name, pattern) or fnmatch.fnmatch(family, pattern)
    return pattern in name or pattern in family


_ABBREVIATIONS = ("e.g", "i.e")  # their full stop ends no sentence


def _first_sentence(text: str) -> str:
    """A description's first sentence."""
    end = text.find(". ")
    while end >= 0 and text[:end].endswith(_ABBREVIATIONS):
        end = text.find(". ", end + 2)
    return text if end < 0 else text[: end + 1]


@app.command()
def summary(
    run: Annotated[str, typer.Option(help="Run id or run name.")],
    block_size: Annotated[
        int | None,
        typer.Option(
            help="Stored block size, when the run has several [default: the tracer's own, else 64]."
        ),
    ] = None,
    output: OutputOption = None,
    as_of: AsOfOption = None,
    engine: EngineOption = "local",
    address: AddressOption = None,
) -> None:
    """Write the summary.json of a DSA run (the tracer's format).

    Example: kvtrace summary --run ruler_1771772829 --output summary.json
    """
    from kvtrace.analysis.shares import run_analysis
    from kvtrace.analysis.summary import SummaryAnalysis, SummarySpec

    with _busy("Counting"):
        result = run_analysis(
            SummaryAnalysis(SummarySpec(run, block_size)),
            _open(as_of=as_of),
            _executor(engine, address),
        )
    _emit((json.dumps(result, indent=2) + "\n").encode(), output)


@app.command("shell-init")
def shell_init(output: OutputOption = None) -> None:
    """Write a script that opens the same views in a plain duckdb shell.

    Example: kvtrace shell-init -o kvtrace.sql && duckdb -init kvtrace.sql
    """
    from kvtrace.sql import catalog

    _emit(catalog.shell_init_sql(_open()).encode(), output)
