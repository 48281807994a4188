"""Ingest many source files: one after another, in worker processes, or on an executor.

Each file is one commit of its own (`kvtrace.ingest._commit.commit_file`), so files that
were committed before a failure stay committed, and ingesting again skips them.
"""

from __future__ import annotations

import multiprocessing
import re
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from pathlib import Path

from deltalake.exceptions import DeltaError

from kvtrace.errors import InputError, KvtraceError
from kvtrace.ingest._commit import commit_file
from kvtrace.ingest._report import CANNOT_READ, FileReport, IngestReport
from kvtrace.ingest._sources import Found, SourceFile, expand, printable
from kvtrace.ingest.families import JSONL_SUFFIXES, choose, unknown
from kvtrace.ingest.family import Advance, IngestOptions
from kvtrace.ingest.probe import Probe
from kvtrace.warehouse import Warehouse
from kvtrace.warehouse.no_pandas import pyarrow_without_pandas

Progress = Callable[[int, int], None]  # (bytes done, bytes in all)
# Input per worker process below which one is not started: a worker costs about half a
# second and 100 MB to start (a fresh interpreter importing Arrow and Delta Lake), which
# is what reading this much takes in the process that is already running.
WORKER_BYTES = 64 << 20
NOT_READ = "not a trace kvtrace reads"
_COLOURS = re.compile(r"\x1b\[[0-9;]*m")


def ingest_paths(
    warehouse: Warehouse,
    paths: list[str] | Found,
    options: IngestOptions,
    *,
    progress: Progress | None = None,
    jobs: int = 1,
    executor: Executor | None = None,
) -> IngestReport:
    """Ingest every file named by ``paths`` (files, folders or glob patterns, or what
    `expand` found of them); those that cannot be read are reported last, as
    `report.CANNOT_READ`."""
    found = paths if isinstance(paths, Found) else expand(paths)
    report = _ingest_files(warehouse, found.files, options, progress, jobs, executor)
    report.files += [
        FileReport(item.path, "", f"{CANNOT_READ} ({item.reason})") for item in found.unreadable
    ]
    return report


def _ingest_files(
    warehouse: Warehouse,
    sources: list[SourceFile],
    options: IngestOptions,
    progress: Progress | None,
    jobs: int,
    executor: Executor | None,
) -> IngestReport:
    """Ingest ``sources``, one after another, in worker processes or on ``executor``."""
    if executor is not None:
        return _in_parallel(warehouse.location, sources, options, progress, executor)
    total = sum(s.size for s in sources)
    workers = min(jobs, len(sources), max(1, total // WORKER_BYTES))
    if workers > 1:
        context = multiprocessing.get_context("spawn")  # no forked copies of Arrow's threads
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            return _in_parallel(warehouse.location, sources, options, progress, pool)
    done = 0
    reports: list[FileReport] = []
    for source in sources:

        def advance(offset: int, base: int = done) -> None:
            if progress:
                progress(base + offset, total)

        try:
            reports.append(ingest_file(warehouse, source, options, advance))
        except Exception as exc:
            raise _stopped_at(warehouse.location, source, exc, reports) from exc
        done += source.size
        advance(0)
    return IngestReport(reports)


def ingest_file(
    warehouse: Warehouse, source: SourceFile, options: IngestOptions, advance: Advance
) -> FileReport:
    """Ingest one file with the family that reads it."""
    probe = Probe.of(source)
    chosen = choose(probe, options)
    if chosen is None and probe.is_empty:
        advance(source.size)
        return FileReport(source.shown, "", "empty file")
    if chosen is None:
        if source.named or source.path.name.endswith(JSONL_SUFFIXES):
            raise unknown(probe)
        advance(source.size)
        return FileReport(source.shown, "", NOT_READ)
    family, fmt = chosen
    return commit_file(warehouse, probe, family, fmt, options, advance)


def _stopped_at(
    location: str, source: SourceFile, exc: Exception, committed: list[FileReport]
) -> KvtraceError:
    """One sentence for a file that failed: why, and what was committed before it."""
    name = printable(source.path.name)
    if isinstance(exc, KvtraceError):
        message = printable(str(exc))
    elif isinstance(exc, (OSError, DeltaError)):
        message = f"{name} was not ingested: the warehouse at {location} failed ({_short(exc)})"
    else:
        message = (
            f"kvtrace failed unexpectedly on {name} "
            f"({type(exc).__name__}: {_short(exc)}); rerun with --debug and report it"
        )
    done = [Path(r.path).name for r in committed if r.status == "ingested"]
    if done:
        listed = ", ".join(done[:3]) + (f" and {len(done) - 3} more" if len(done) > 3 else "")
        message += (
            f" ({listed} {'was' if len(done) == 1 else 'were'} committed before it; "
            "the same command again skips what was committed)"
        )
    return type(exc)(message) if isinstance(exc, KvtraceError) else KvtraceError(message)


def _short(exc: BaseException) -> str:
    """The first line of an error's message, without terminal colours, at most 200
    characters (storage libraries chain long multi-line messages)."""
    text = _COLOURS.sub("", str(exc)).strip()
    first = next((line.strip() for line in text.splitlines() if line.strip()), repr(exc))
    return printable(first[:200])


def _in_parallel(
    location: str,
    sources: list[SourceFile],
    options: IngestOptions,
    progress: Progress | None,
    pool: Executor,
) -> IngestReport:
    """One task per file on ``pool``; progress advances as whole files finish, and the
    reports keep the files' order."""
    total, done = sum(s.size for s in sources), 0
    reports: dict[int, FileReport] = {}
    failure: tuple[SourceFile, Exception] | None = None
    running = {
        pool.submit(_in_worker, location, source, options): (n, source)
        for n, source in enumerate(sources)
    }
    for future in as_completed(running):
        n, source = running[future]
        try:
            reports[n] = future.result()
        except Exception as exc:
            failure = failure or (source, exc)
            continue
        done += source.size
        if progress:
            progress(done, total)
    if failure is not None:
        raise _stopped_at(location, *failure, list(reports.values())) from failure[1]
    return IngestReport([reports[n] for n in sorted(reports)])


def _in_worker(location: str, source: SourceFile, options: IngestOptions) -> FileReport:
    pyarrow_without_pandas()  # a worker is a process of kvtrace's own, as a command is
    return ingest_file(Warehouse(location), source, options, lambda _: None)


def skipped_files(report: IngestReport) -> list[str]:
    """Names of the files of a folder or pattern that no family reads."""
    return [Path(f.path).name for f in report.files if f.status == NOT_READ]


def unreadable_error(report: IngestReport) -> InputError | None:
    """The error an ingest ends with when it skipped files or folders it could not read
    (once the rest is ingested and reported), or None."""
    names = [Path(path).name for path in report.unreadable]
    if not names:
        return None
    listed = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    what = "1 file or folder" if len(names) == 1 else f"{len(names)} files or folders"
    verb = "was" if len(names) == 1 else "were"
    return InputError(
        f"{what} could not be read and {verb} skipped ({listed}); the rest was ingested"
    )
