"""The one way a source file enters the warehouse, whatever its family.

`commit_file` names the run, holds the run's lock, skips bytes the warehouse already
holds (`kvtrace.ingest._known_bytes`), lets the family read the file into one commit,
writes the ``runs`` row, the quarantine and the source checks beside the rows, and
commits: the file becomes visible whole or not at all.  A family whose reader looks up
nothing in the run but its records (profiler traces) reads without the lock and takes it
only to commit.
"""

from __future__ import annotations

from datetime import datetime, timezone

from kvtrace.ingest._known_bytes import run_holding
from kvtrace.ingest._report import FileReport
from kvtrace.ingest._sources import SourceFile, printable
from kvtrace.ingest.family import Advance, Family, FileRows, IngestOptions
from kvtrace.ingest.probe import Probe
from kvtrace.ingest.sink import FileSink
from kvtrace.warehouse import Warehouse
from kvtrace.warehouse.rows.bookkeeping import make_run_id, quarantine_rows, run_row


def commit_file(
    warehouse: Warehouse,
    probe: Probe,
    family: Family,
    fmt: str,
    options: IngestOptions,
    advance: Advance,
) -> FileReport:
    """Ingest one file that ``family`` reads as ``fmt``, in one commit."""
    source = probe.source
    run_name = printable(family.run_name(probe, fmt, options))
    run_id = make_run_id(run_name, "ingest")

    def read_and_commit(locked: bool) -> FileReport | None:
        """Skip bytes a run holds, let the family read the file into one commit,
        write the bookkeeping and commit.  Not ``locked``: the commit takes the run's
        lock, and None means it was given up, as the run gained one of its records
        meanwhile."""
        named = options.run_name is not None
        if (holder := run_holding(warehouse, source, run_id, fmt, named)) is not None:
            advance(source.size)
            return FileReport(source.shown, holder, "already ingested", fmt=fmt, family=family.name)
        commit = warehouse.begin(run_id, source_path=source.shown, source_size=source.size)
        try:
            sink = FileSink(warehouse, commit)
            rows = family.read(probe, fmt, sink, options, advance)
            commit.source_sha256 = source.sha256()  # hashed alongside the read
            _write_bookkeeping(sink, source, run_name, fmt, rows)
        except BaseException:
            warehouse.abort(commit)
            raise
        if locked:
            warehouse.commit(commit)
        else:
            with warehouse.run_lock(run_id):
                if sink.collides():
                    warehouse.abort(commit)
                    return None
                warehouse.commit(commit)
        advance(source.size)
        if not commit.landed:  # another process committed the same bytes first
            return FileReport(source.shown, run_id, "already ingested", fmt=fmt, family=family.name)
        return FileReport(
            source.shown,
            run_id,
            "ingested",
            rows=rows.rows,
            rejected=len(rows.rejected),
            skipped=dict(rows.skipped + sink.skipped),
            disagreements=rows.checks,
            notes=rows.notes,
            fmt=fmt,
            family=family.name,
        )

    # Read without the run's lock (other files of the run are read at once) and commit
    # holding it, unless a commit that landed meanwhile stored one of the same records:
    # then read again as the other families do.
    if family.reads_only_record_keys and (report := read_and_commit(locked=False)):
        return report
    # One file of a run at a time: what a reader looks up in the run (string request
    # ids, records already stored, bytes already ingested) must see what the others
    # committed.
    with warehouse.run_lock(run_id):
        report = read_and_commit(locked=True)
    assert report is not None  # holding the lock, nothing can land in between
    return report


def _write_bookkeeping(
    sink: FileSink, source: SourceFile, run_name: str, fmt: str, rows: FileRows
) -> None:
    """The ``runs`` row, the quarantine and the source checks of one file."""
    commit = sink.commit
    sidecar = source.sidecar
    sink.write_rows(
        "runs",
        [
            run_row(
                commit.run_id,
                run_name,
                rows.kind,
                source="ingest",
                collector_config={
                    "format": fmt,
                    "source_sha256": commit.source_sha256,
                    **rows.config,
                },
                dataset=rows.dataset,
                dataset_variant=sidecar.get("dataset_variant"),
                model=sidecar.get("model"),
                model_config=sidecar.get("model_config"),
                rank=rows.rank,
                world_size=rows.world_size,
                started_at=_parse_time(sidecar.get("started_at")),
            )
        ],
    )
    if rows.rejected:
        sink.write_rows(
            "quarantine",
            quarantine_rows(commit.run_id, source.shown, commit.source_sha256, rows.rejected),
        )
    if rows.checks:
        sink.write_rows(
            "ingest_checks",
            [
                {
                    "run_id": commit.run_id,
                    "source_path": source.shown,
                    "statistic": name,
                    "rows_checked": tally.checked,
                    "rows_disagreeing": tally.disagreeing,
                    "first_line": tally.first_line,
                    "source_value": tally.source_value,
                    "recomputed_value": tally.recomputed,
                }
                for name, tally in sorted(rows.checks.items())
            ],
        )


def _parse_time(value: object) -> datetime | None:
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, timezone.utc)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
    return None
