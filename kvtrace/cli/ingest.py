"""``kvtrace ingest``: load trace dumps into the warehouse."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kvtrace.cli import _app
from kvtrace.cli._app import _Console, _executor, _open, app, err, out
from kvtrace.cli._options import AddressOption, EngineOption, one_of
from kvtrace.cli._output import _answer, _check_output, _output_format, _with_progress
from kvtrace.defaults import DEFAULT_BLOCK_SIZE, OutputFormat
from kvtrace.errors import IngestRejected, InputError, KvtraceError

if TYPE_CHECKING:  # the heavy modules load inside the commands that need them
    from kvtrace.ingest import IngestReport, SourceFile, Unreadable
    from kvtrace.ingest.family import IngestOptions


def _kind_names() -> tuple[str, ...]:
    from kvtrace.ingest.families import kind_names

    return kind_names()


def _asked_trace_formats() -> tuple[str, ...]:
    from kvtrace.ingest.readers.workload import ASKED_FORMATS

    return tuple(ASKED_FORMATS)


def _family_named(name: str) -> object:
    from kvtrace.ingest.families import family_named

    return family_named(name)


@app.command()
def ingest(
    paths: Annotated[
        list[str], typer.Argument(help="Trace files, folders of them, or glob patterns (quoted).")
    ],
    dataset: Annotated[str | None, typer.Option(help="Dataset label for every record.")] = None,
    run_name: Annotated[
        str | None, typer.Option(help="Run name (default: the records', else the trace folder's).")
    ] = None,
    block_size: Annotated[
        int, typer.Option(help="Block size for records that do not state theirs.")
    ] = DEFAULT_BLOCK_SIZE,
    prefix_key_tokens: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Prompt tokens a DSA dump's prefix key covers (the seed tracer's "
            "--trace-prefix-key-tokens) [default: the run's summary.json, else what each "
            "record states].",
        ),
    ] = None,
    kind: Annotated[
        str | None,
        typer.Option(
            callback=one_of(_kind_names, _family_named),
            help="Read every file as this trace family, a built-in or an installed one "
            "(default: told by each file's content); a name kvtrace lacks lists them.",
        ),
    ] = None,
    experiment: Annotated[
        str | None,
        typer.Option(
            help="Label for serving and benchmark runs, e.g. exp2_2p6d (default: the run "
            "name); the serving report covers an experiment's runs together."
        ),
    ] = None,
    strict: Annotated[bool, typer.Option(help="Exit non-zero when any line was rejected.")] = False,
    columns: Annotated[
        str | None,
        typer.Option(
            help="A CSV arrival trace of another layout: arrival=COL,input_tokens=COL,"
            "output_tokens=COL[,model=COL,log_type=COL,arrival_unit=s|ms|us|datetime]."
        ),
    ] = None,
    trace_format: Annotated[
        str | None,
        typer.Option(
            callback=one_of(_asked_trace_formats),
            help="Read Mooncake-shaped arrival traces as this format, which their content "
            "cannot tell: mooncake-delta (each turn holds only the prompt it adds).",
        ),
    ] = None,
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            help="Files read at once, each in its own process (one per 64 MB of input at "
            "most: a process takes half a second to start).",
        ),
    ] = 1,
    engine: EngineOption = "local",
    address: AddressOption = None,
    then_sql: Annotated[
        str | None,
        typer.Option(
            "--sql",
            metavar="SQL",
            help="Then run this read-only SQL on the warehouse as the ingest left it and "
            "print its rows, as kvtrace sql does (the ingest's report goes to stderr).",
        ),
    ] = None,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            "-f",
            help="--sql's rows as table, csv, json or parquet [default: the --output "
            "file's suffix, else table].",
            show_default=False,
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write --sql's rows to this file.")
    ] = None,
) -> None:
    """Load existing trace dumps into the warehouse.

    Reads DSA top-k traces, KV pool time series and request metrics (JSONL, optionally
    gzipped), RULER prediction files, arrival traces (Azure, BurstGPT, Splitwise/Vidur
    CSVs, Mooncake JSONL), benchmark or simulator results (vLLM result JSON, AIPerf
    records, Vidur request and batch metrics), PyTorch profiler (Kineto) traces and
    serving run summaries, each told by its content.  A folder gives every such file
    in it.  Bad lines go to the quarantine (see the quarantine view) and the rest is
    ingested; the same file ingested twice adds nothing.  With --sql, one process ingests
    and answers: the SQL is checked first and runs once the files are in.

    Example: kvtrace ingest outputs/ruler_1771772829/
    """
    answer_format = _answer_options(then_sql, fmt, output)
    from kvtrace.ingest import IngestOptions, expand, ingest_with
    from kvtrace.ingest.fanout import unreadable_error
    from kvtrace.ingest.readers.workload import parse_column_mapping

    found = expand(paths)  # before the warehouse: paths that give nothing create nothing
    if not found.files and found.unreadable:
        raise InputError(_nothing_readable(found.unreadable))

    given = IngestOptions(
        dataset=dataset,
        run_name=run_name,
        block_size=block_size,
        prefix_key_tokens=prefix_key_tokens,
        kind=kind,
        experiment=experiment,
        columns=parse_column_mapping(columns) if columns is not None else None,
        trace_format=trace_format,
    )
    _refuse_unknown(found.files, given)
    executor = _executor(engine, address)  # a cluster that will not start creates nothing
    warehouse = _open(create=True)
    _check_output(output, warehouse)
    report = _with_progress(
        "ingesting",
        lambda hook: ingest_with(
            warehouse, found, given, progress=hook, jobs=jobs, executor=executor
        ),
    )
    _print_ingest(report, out if then_sql is None else err)
    if (unread := unreadable_error(report)) is not None:
        raise unread
    if strict and report.rejected:
        raise IngestRejected(f"{report.rejected} line(s) were rejected (--strict)")
    if then_sql is not None and answer_format is not None:
        _answer(warehouse, then_sql, answer_format, output)


def _refuse_unknown(files: list[SourceFile], options: IngestOptions) -> None:
    """Raise the sentence for the first file named on the command line that no family
    reads, before anything is written (a folder's such files are skipped instead)."""
    from kvtrace.ingest.families import choose, unknown
    from kvtrace.ingest.probe import Probe

    for source in filter(lambda source: source.named, files):
        probe = Probe.of(source)
        if choose(probe, options) is None and not probe.is_empty:
            raise unknown(probe)


def _nothing_readable(unreadable: list[Unreadable]) -> str:
    """The sentence for paths none of which could be read."""
    listed = "; ".join(f"{item.path} ({item.reason})" for item in unreadable[:5])
    more = f" and {len(unreadable) - 5} more" if len(unreadable) > 5 else ""
    return f"nothing could be read, so nothing was ingested: {listed}{more}"


def _answer_options(
    then_sql: str | None, fmt: str | None, output: Path | None
) -> OutputFormat | None:
    """The format of ``--sql``'s rows, once its SQL is known to parse and only read
    (before any file is read); None without ``--sql``."""
    if then_sql is None:
        if fmt is not None or output is not None:
            raise KvtraceError("--format and --output shape the rows of --sql; give it the SQL")
        return None
    import duckdb

    from kvtrace.sql.query import read_only_statements

    with duckdb.connect(":memory:") as con:
        read_only_statements(con, then_sql)
    return _output_format(fmt, output)


def _print_ingest(report: IngestReport, to: _Console) -> None:
    """The ingest's report, a line a file and a total, printed on ``to``."""
    from kvtrace.ingest.fanout import NOT_READ, skipped_files

    for item in report.files:
        name = Path(item.path).name
        if item.status == NOT_READ:
            continue
        if item.status != "ingested":
            to.say(f"{name}: {item.status}" + (f" (run {item.run_id})" if item.run_id else ""))
            continue
        line = f"{name}: {item.rows:,} rows into run {item.run_id}"
        if item.rejected:
            line += f", {item.rejected:,} line(s) rejected (see the quarantine view)"
        to.say(line)
        for reason, count in item.skipped.items():
            to.say(f"  skipped {count:,} {reason}")
        for note in item.notes:
            to.say(f"  {note}")
        for stat, tally in item.disagreements.items():
            if tally.first_line is None:  # a file-wide figure, e.g. RULER's summary.csv
                to.say(
                    f"  {stat}: the source says {tally.source_value:g}, kvtrace "
                    f"recomputes {tally.recomputed:g}; the samples are stored"
                )
                continue
            to.say(
                f"  source {stat.removeprefix('src_')} disagreed with the recomputed value "
                f"on {tally.disagreeing:,} of {tally.checked:,} rows (line {tally.first_line}: "
                f"{tally.source_value:g} vs {tally.recomputed:g}); the recomputed values are "
                "stored"
            )
    if skipped := skipped_files(report):
        shown = ", ".join(skipped[:5]) + (
            f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
        )
        to.say(f"skipped {len(skipped):,} file(s) that are not traces kvtrace reads: {shown}")
    if len(families := report.by_family()) > 1:  # a folder of several kinds
        to.say(
            "by family: "
            + ", ".join(
                f"{family} {files:,} file{'s' * (files != 1)} ({rows:,} rows)"
                for family, (files, rows) in families.items()
            )
        )
    to.say(
        f"{report.rows:,} rows ingested, {report.rejected:,} line(s) rejected into "
        f"{_app.options.path}"
    )
