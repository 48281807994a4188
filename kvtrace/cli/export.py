"""``kvtrace export``: what the warehouse holds, in other tools' formats."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from kvtrace.cli._app import _open, app, err
from kvtrace.cli._options import AsOfOption, one_of
from kvtrace.cli._output import _check_output, _shows_progress
from kvtrace.export.sources import SOURCE_NAMES, source_help

export_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Export runs to other tools' formats.\n\n"
    "Example: kvtrace export perfetto --run demo-ruler-dsa-ref -o trace.json",
)
app.add_typer(export_app, name="export")


def _sources(values: list[str] | None) -> list[str] | None:
    """Each ``--source`` one the export knows (a usage error listing them otherwise)."""
    check = one_of(lambda: SOURCE_NAMES)
    for value in values or []:
        check(value)
    return values


@export_app.command("perfetto")
def export_perfetto_command(
    run: Annotated[
        list[str],
        typer.Option(
            help="Run id or run name to export (repeatable): several runs lie side by "
            "side, each run's processes after the previous run's."
        ),
    ],
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            help="The trace file to write (.json, or .json.gz to gzip it); it appears "
            "only once whole.",
        ),
    ],
    source: Annotated[
        list[str] | None,
        typer.Option(
            metavar="SOURCE",
            callback=_sources,
            help="What to put in (repeatable): "
            + source_help()
            + " [default: everything the runs have].",
        ),
    ] = None,
    dsa_block_size: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="The stored block size whose DSA steps to draw [default: each run's "
            "smallest with step times].",
        ),
    ] = None,
    kv_bucket: Annotated[
        float,
        typer.Option(min=0.001, metavar="SECONDS", help="Seconds per KV-residency counter value."),
    ] = 1.0,
    as_of: AsOfOption = None,
) -> None:
    """Write Chrome trace / Perfetto JSON of everything with a time: profiler events and
    counters, DSA steps, pool snapshots, engine metrics, KV-event residency, requests.

    Open the file in ui.perfetto.dev (Open trace file) or chrome://tracing.  Profiler
    rows keep the profiler's clock; wall-clock rows start at 0 at their run's start.
    Each run's processes are named after it (pids from 1, in the order the runs are
    given).

    Example: kvtrace export perfetto --run demo-ruler-dsa-ref -o trace.json
    """
    from kvtrace.export.perfetto import PerfettoSpec, export_perfetto

    warehouse = _open(as_of=as_of)
    _check_output(output, warehouse)
    spec = PerfettoSpec(
        tuple(run),
        output,
        sources=tuple(dict.fromkeys(source)) if source else SOURCE_NAMES,
        dsa_block_size=dsa_block_size,
        kv_bucket_s=kv_bucket,
    )
    report = export_perfetto(warehouse, spec, _progress_line())
    if _shows_progress():
        err.print(" " * 60, end="\r")  # the progress line's place, cleared
    counts = ", ".join(f"{source} {count:,}" for source, count in report.by_source.items())
    names = ", ".join(name for _, name in report.runs)
    err.say(f"wrote {output}: {report.events:,} events of {names} ({counts})")
    for note in report.notes:
        err.say(f"note: {note}")


def _progress_line() -> Callable[[int], None] | None:
    """Events written so far, over itself on a terminal (not with --quiet), every
    100,000 events."""
    if not _shows_progress():
        return None
    shown = [0]

    def show(events: int) -> None:
        if events - shown[0] >= 100_000:
            shown[0] = events
            err.print(f"exporting: {events:,} events written", end="\r")

    return show
