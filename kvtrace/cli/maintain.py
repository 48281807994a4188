"""Warehouse upkeep: ``optimize``, ``vacuum``, ``check``, ``migrate``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from kvtrace.cli import _app
from kvtrace.cli._app import _open, app, err, out
from kvtrace.cli._output import _busy
from kvtrace.errors import WarehouseDamaged

if TYPE_CHECKING:  # loaded by the commands that need it
    from kvtrace.warehouse.ops.maintenance import MaintenanceReport


@app.command()
def optimize(
    target_mb: Annotated[int, typer.Option(min=1, help="Size of the compacted files.")] = 256,
) -> None:
    """Compact each table's small files into large ones (Delta Lake's compaction).

    Readers see the same rows before and after; the old files stay until 'kvtrace vacuum'.

    Example: kvtrace optimize
    """
    from kvtrace.warehouse.ops.maintenance import optimize as compact

    with _busy("Compacting"):
        report = compact(_open(), target_mb=target_mb)
    _print_tables(report)
    out.say(
        f"warehouse version {report.version}" + ("" if report.tables else " (nothing to compact)")
    )


@app.command()
def vacuum(
    retain_hours: Annotated[
        float,
        typer.Option(
            min=0,
            help="Keep every file a version of the last N hours needs (under 1 needs --force).",
        ),
    ] = 168.0,
    force: Annotated[
        bool,
        typer.Option(
            help="Vacuum with a retention under 1 hour: a query running now may lose files "
            "it reads, and --as-of those versions stops working."
        ),
    ] = False,
    dry_run: Annotated[bool, typer.Option(help="List what would go; delete nothing.")] = False,
) -> None:
    """Delete files that no recent version needs (Delta Lake's vacuum), and drop the files
    of writers that died before their commit was recorded.

    Never deletes a file of the newest version or of a commit being written.  Versions
    older than --retain-hours may no longer be readable with --as-of.

    Example: kvtrace vacuum --retain-hours 24
    """
    from kvtrace.warehouse.ops.maintenance import vacuum as sweep

    report = sweep(_open(), retain_hours=retain_hours, force=force, dry_run=dry_run)
    _print_tables(report)
    out.say("nothing to delete" if not report.tables else f"warehouse version {report.version}")


def _print_tables(report: MaintenanceReport) -> None:
    """A maintenance report's notes (on stderr), then what it did to each table."""
    for note in report.notes:
        err.say(note)
    for table, what in report.tables.items():
        out.say(f"{table}: {what}")


@app.command("check")
def check_command(
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="Return a damaged warehouse to its newest consistent version and "
            "list the sources to ingest again.",
        ),
    ] = False,
    deep: Annotated[
        bool,
        typer.Option(
            "--deep",
            help="Read every page of every data file (and verify its checksum), not only "
            "each file's footer: finds bytes garbled inside a file, at the cost of reading "
            "the whole warehouse.",
        ),
    ] = False,
) -> None:
    """Verify every table's log, the journal and every file the warehouse shows.

    Prints one line per problem (table, log version, the rows and sources it affects)
    and exits 1 when anything is wrong.  With --repair, rolls back what cannot be read
    (moving damaged log entries aside, never deleting a data file) and says which sources
    to ingest again.

    Example: kvtrace check --deep --repair
    """
    from kvtrace.warehouse.ops.integrity import check
    from kvtrace.warehouse.ops.repair import repair as mend

    warehouse = _open()
    if repair:
        with _busy("Repairing"):
            done = mend(warehouse, deep)
        for line in done.done:
            out.say(f"repaired: {line}")
        if done.sources:
            out.say("ingest these sources again to restore their rows: " + ", ".join(done.sources))
        found = done.after
    else:
        with _busy("Checking"):
            found = check(warehouse, deep)
    for problem in found.problems:
        out.say(f"problem: {problem.line()}")
    for note in found.notes:
        out.say(f"note: {note}")
    if found.problems:
        raise WarehouseDamaged(
            f"{len(found.problems)} problem(s) in {warehouse.location}"
            + (
                ""
                if repair
                else f"; 'kvtrace check --repair{' --deep' * deep}' returns it to its newest "
                "consistent version"
            )
        )
    out.say(
        f"{warehouse.location} is healthy: {len(found.logs)} logs and "
        f"{found.files_checked:,} data files checked"
    )


@app.command()
def migrate() -> None:
    """Convert a warehouse of an earlier kvtrace (its own manifest) to Delta Lake tables,
    in place: the data files stay, the tables' logs list them.

    Example: kvtrace -w old-warehouse migrate
    """
    from kvtrace.warehouse.ops.migrate import migrate as convert

    with _busy("Converting"):
        report = convert(_app.options.path)
    for table, files in report.tables.items():
        out.say(f"{table}: {files} file(s)")
    out.say(f"{_app.options.path} is now made of Delta tables (version {report.version})")
