"""``kvtrace ingest``: load existing trace dumps into the warehouse.

Each source file is one commit: it becomes visible whole or not at all, and the same
bytes ingested again into the same run add nothing.
"""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from kvtrace.defaults import DEFAULT_BLOCK_SIZE, Kind
from kvtrace.errors import InputError, KvtraceError
from kvtrace.ingest.dsa import read_dsa_file
from kvtrace.ingest.dsa_formats import Format, detect_format
from kvtrace.ingest.eval_preds import is_eval_record, read_eval_file, summary_check, task_name
from kvtrace.ingest.kineto import KinetoReader, looks_like_kineto
from kvtrace.ingest.lines import read_chunks
from kvtrace.ingest.results import (
    ResultFormat,
    detect_results_csv,
    is_aiperf_record,
    read_aiperf_records,
    read_results_csv,
    read_vllm_result,
)
from kvtrace.ingest.serving import ServingKind, detect_serving_kind, read_serving_file
from kvtrace.ingest.sources import SourceFile, expand
from kvtrace.ingest.workload import (
    ColumnMapping,
    WorkloadFormat,
    csv_header,
    detect_csv_format,
    is_mooncake_record,
    read_workload_file,
)
from kvtrace.warehouse import Commit, Warehouse
from kvtrace.warehouse.bookkeeping import make_run_id, quarantine_rows, run_row
from kvtrace.warehouse.dsa_checks import StatCheck
from kvtrace.warehouse.dsa_writer import DsaFileResult, DsaWriter
from kvtrace.warehouse.rejects import BadLine
from kvtrace.warehouse.schema import TABLES

Progress = Callable[[int, int], None]
_SERVING_SUFFIXES = ("_pool_timeseries", "-pool-timeseries", "_pool_snapshots", "_pool",
                     "_request_metrics", "_metrics", "-metrics", "_requests", "_summary")


@dataclass
class FileReport:
    """What happened to one source file."""

    path: str
    run_id: str
    status: str  # "ingested" | "already ingested"
    rows: int = 0
    rejected: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    disagreements: dict[str, StatCheck] = field(default_factory=dict)
    fmt: str = ""


@dataclass
class IngestReport:
    files: list[FileReport]

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    @property
    def rejected(self) -> int:
        return sum(f.rejected for f in self.files)


def ingest(warehouse: Warehouse, paths: list[str], *, dataset: str | None = None,
           run_name: str | None = None, block_size: int = DEFAULT_BLOCK_SIZE,
           kind: Kind | None = None, experiment: str | None = None,
           columns: ColumnMapping | None = None,
           progress: Progress | None = None, jobs: int = 1,
           executor: Executor | None = None) -> IngestReport:
    """Ingest every trace file named by ``paths`` (files, folders or glob patterns).

    Parameters
    ----------
    dataset, run_name
        Override what the records or their folder say.
    block_size
        Block size for DSA records that do not state theirs.
    kind
        ``dsa``, ``pool``, ``requests``, ``eval``, ``workload`` or ``benchmark``; by
        default each file's
        first record (a CSV file's header) tells.
    experiment
        Label of serving runs (pool series, request metrics), e.g. ``exp2_2p6d``.
    columns
        For CSV arrival traces of a layout kvtrace does not know: which columns hold
        the arrival, the lengths (and model, log type); see `parse_column_mapping`.
    progress
        Called with (bytes done, bytes in all) as the files are read.
    jobs
        Files read at once, each in its own process (one commit per file either way).
    executor
        Where to read the files instead, one task per file (e.g. a Ray cluster's, from
        `kvtrace.distributed`); its workers must reach the warehouse.
    """
    sources = expand(paths)
    options = _FileOptions(dataset, run_name, block_size, kind, experiment, columns)
    if executor is not None:
        return _ingest_in_parallel(warehouse.location, sources, options, progress, executor)
    if jobs > 1 and len(sources) > 1:
        context = multiprocessing.get_context("spawn")  # no forked copies of Arrow's threads
        with ProcessPoolExecutor(min(jobs, len(sources)), mp_context=context) as pool:
            return _ingest_in_parallel(warehouse.location, sources, options, progress, pool)
    total = sum(s.size for s in sources)
    done = 0
    reports = []
    for source in sources:
        def advance(offset: int, base: int = done) -> None:
            if progress:
                progress(base + offset, total)

        try:
            reports.append(_ingest_one(warehouse, source, options, advance))
        except KvtraceError as exc:
            raise _after(exc, len(reports)) from None
        done += source.size
        advance(0)
    return IngestReport(reports)


@dataclass(frozen=True)
class _FileOptions:
    """What `ingest` was told that applies to every file."""

    dataset: str | None
    run_name: str | None
    block_size: int
    kind: Kind | None
    experiment: str | None
    columns: ColumnMapping | None


def _after(exc: KvtraceError, committed: int) -> KvtraceError:
    """``exc``, saying how many files were committed before it, if any."""
    if not committed:
        return exc
    return type(exc)(f"{exc} ({committed} file(s) before it were ingested and committed; "
                     "ingesting again skips them)")


def _ingest_in_parallel(location: str, sources: list[SourceFile], options: _FileOptions,
                        progress: Progress | None, pool: Executor) -> IngestReport:
    """`ingest` with one task per file on ``pool``; progress advances as whole files
    finish, and the reports keep the files' order."""
    total, done = sum(s.size for s in sources), 0
    reports: dict[int, FileReport] = {}
    failure: KvtraceError | None = None
    running = {pool.submit(_ingest_in_worker, location, source, options): (n, source)
               for n, source in enumerate(sources)}
    for future in as_completed(running):
        n, source = running[future]
        try:
            reports[n] = future.result()
        except KvtraceError as exc:
            failure = failure or exc
            continue
        done += source.size
        if progress:
            progress(done, total)
    if failure is not None:
        raise _after(failure, len(reports))
    return IngestReport([reports[n] for n in sorted(reports)])


def _ingest_in_worker(location: str, source: SourceFile, options: _FileOptions) -> FileReport:
    return _ingest_one(Warehouse(location), source, options, lambda _: None)


def _ingest_one(warehouse: Warehouse, source: SourceFile, options: _FileOptions,
                advance: Callable[[int], None]) -> FileReport:
    dataset, run_name, block_size = options.dataset, options.run_name, options.block_size
    kind, experiment, columns = options.kind, options.experiment, options.columns

    if source.path.name.endswith(".csv"):
        return _ingest_csv(warehouse, source, run_name, advance, columns)
    if source.path.name.endswith((".pt.trace.json", ".pt.trace.json.gz")) or (
            source.path.name.endswith((".json", ".json.gz")) and looks_like_kineto(source.path)):
        return _ingest_timeline(warehouse, source, run_name, advance)
    if source.path.name.endswith(".json") and _is_vllm_result(source):
        return _ingest_results(warehouse, source, run_name, "vllm", advance)
    if source.path.name.endswith(".json"):
        report = _ingest_run_summary(warehouse, source, run_name, experiment)
        advance(source.size)
        return report
    first = _first_line(source)
    if not first:
        return FileReport(str(source.path), "", "empty file")
    found = kind or _detect_kind(first, source)
    if found == "benchmark":
        return _ingest_results(warehouse, source, run_name, "aiperf", advance)
    if found == "workload":
        return _ingest_workload_file(warehouse, source, run_name, "mooncake", advance)
    if found == "eval":
        return _ingest_eval_file(warehouse, source, run_name, advance)
    if found == "dsa":
        return _ingest_dsa_file(warehouse, source, first, dataset, run_name, block_size,
                                advance)
    serving: ServingKind = "pool" if found == "pool" else "requests"
    return _ingest_serving_file(warehouse, source, serving, run_name, experiment, advance)


def _first_line(source: SourceFile, look_at: int = 1000) -> bytes:
    """The first line holding a JSON object (a truncated or stray first line is the
    quarantine's business, not a reason to refuse the file); else the first line."""
    first = b""
    seen = 0
    for chunk in read_chunks(source.path, chunk_bytes=1 << 16):
        for line in chunk.data.split(b"\n"):
            if not line.strip():
                continue
            first = first or line
            try:
                if isinstance(json.loads(line), dict):
                    return line
            except ValueError:
                pass
            seen += 1
            if seen >= look_at:
                return first
    return first


def _detect_kind(first: bytes, source: SourceFile) -> Kind:
    try:
        record = json.loads(first)
    except ValueError:
        raise InputError(f"{source.path}: the first line is not JSON") from None
    if isinstance(record, dict) and (serving := detect_serving_kind(record)):
        return serving
    if isinstance(record, dict) and is_eval_record(record):
        return "eval"
    if isinstance(record, dict) and is_mooncake_record(record):
        return "workload"
    if isinstance(record, dict) and is_aiperf_record(record):
        return "benchmark"
    try:
        detect_format(first, str(source.path))
    except InputError:
        raise InputError(
            f"{source.path} is not a trace kvtrace knows: its first record is neither a DSA "
            "record (selected_token_pos), a pool snapshot (worker_id, held_tokens), "
            "request metrics (execution_mode, latency_s), a RULER prediction (pred, "
            "outputs), an arrival trace (timestamp, input_length, output_length) nor "
            "AIPerf records (metadata, metrics); "
            "--kind forces one") from None
    return "dsa"


def serving_run_name(source: SourceFile) -> str:
    """``exp2_2p6d`` from ``exp2_2p6d_pool_timeseries.jsonl``; else the folder's name."""
    stem = source.path.name.split(".")[0]
    for suffix in _SERVING_SUFFIXES:
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    return stem if len(stem) > 1 else source.path.parent.name


def _ingest_serving_file(warehouse: Warehouse, source: SourceFile, kind: ServingKind,
                         run_name: str | None, experiment: str | None,
                         advance: Callable[[int], None]) -> FileReport:
    name = run_name or serving_run_name(source)
    run_id = make_run_id(name, "ingest")
    if (done := _already_ingested(warehouse, source, run_id, kind, advance)):
        return done
    result = read_serving_file(source.path, kind, advance)
    table_name = "pool_snapshots" if kind == "pool" else "request_metrics"
    spec = TABLES[table_name]
    label = experiment or name
    for row in result.rows:
        row["run_id"], row["experiment"] = run_id, label
    with warehouse.transaction(run_id, source_path=str(source.path), source_sha256=source.sha256(),
                               source_size=source.size) as commit:
        if result.rows:
            table = pa.Table.from_pylist(result.rows, schema=spec.schema)
            warehouse.write(commit, table_name,
                            table.sort_by([(c, "ascending") for c in spec.sort_by]))
        warehouse.write_rows(commit, "runs", _run_row(run_id, name, "serving", source, {
            "format": kind, "experiment": label}, dataset=None))
        _write_quarantine(warehouse, commit, source, result.rejected)
    return FileReport(str(source.path), run_id, "ingested", rows=len(result.rows),
                      rejected=len(result.rejected), fmt=kind)


def _ingest_csv(warehouse: Warehouse, source: SourceFile, run_name: str | None,
                advance: Callable[[int], None],
                columns: ColumnMapping | None = None) -> FileReport:
    """A CSV file: an arrival trace, or a simulator's request or batch metrics."""
    if columns is not None:
        return _ingest_workload_file(warehouse, source, run_name, "mapped", advance, columns)
    header = csv_header(source.path)
    if (workload := detect_csv_format(header)) is not None:
        return _ingest_workload_file(warehouse, source, run_name, workload, advance)
    if (results := detect_results_csv(header)) is not None:
        return _ingest_results(warehouse, source, run_name, results, advance)
    raise InputError(
        f"{source.path} is not a CSV file kvtrace knows: its header "
        f"({', '.join(header[:8])}) has the columns of none of the Azure, BurstGPT or "
        "Splitwise/Vidur arrival traces, nor of Vidur's request or batch metrics")


def _already_ingested(warehouse: Warehouse, source: SourceFile, run_id: str, fmt: str,
                      advance: Callable[[int], None]) -> FileReport | None:
    """The report to return at once when ``source``'s bytes are already in ``run_id``.

    When the run holds no source of the same size, the bytes are new: they are hashed
    in the background while the caller reads them (`SourceFile.sha256` waits for it).
    """
    hashes = warehouse.source_hashes(run_id, source.size)
    if not hashes:
        source.hash_in_background()
        return None
    if source.sha256() not in hashes:
        return None
    advance(source.size)
    return FileReport(str(source.path), run_id, "already ingested", fmt=fmt)


def _with_run_id(table: pa.Table, run_id: str) -> pa.Table:
    """``table`` with its first column, ``run_id``, filled in."""
    return table.set_column(0, "run_id", pa.repeat(pa.scalar(run_id), table.num_rows))


def _is_vllm_result(source: SourceFile) -> bool:
    """Whether a .json file is a vLLM benchmark result (its head names the per-request
    lists), without parsing a large file twice."""
    with open(source.path, "rb") as handle:
        head = handle.read(1 << 16)
    return b'"ttfts"' in head or (b'"input_lens"' in head and b'"output_lens"' in head)


def _ingest_timeline(warehouse: Warehouse, source: SourceFile, run_name: str | None,
                     advance: Callable[[int], None]) -> FileReport:
    """A profiler (Kineto) trace of one rank into ``timeline_events``."""
    name = run_name or source.default_run_name()
    run_id = make_run_id(name, "ingest")
    if (done := _already_ingested(warehouse, source, run_id, "kineto", advance)):
        return done
    reader = KinetoReader(source.path)
    rows = 0
    with warehouse.transaction(run_id, source_path=str(source.path), source_sha256=source.sha256(),
                               source_size=source.size) as commit:
        events = warehouse.open_file(commit, "timeline_events")
        for batch in reader.batches(advance if source.path.suffix != ".gz" else None):
            events.append(_with_run_id(batch, run_id))
            rows += batch.num_rows
        events.close()
        header = reader.header
        warehouse.write_rows(commit, "runs", _run_row(
            run_id, name, "timeline", source, {"format": "kineto", **header.run_config},
            dataset=None, rank=header.rank,
            world_size=header.run_config["distributed_info"].get("world_size")))
        _write_quarantine(warehouse, commit, source, reader.rejected)
    advance(source.size)
    return FileReport(str(source.path), run_id, "ingested", rows=rows,
                      rejected=len(reader.rejected), fmt="kineto")


def _ingest_results(warehouse: Warehouse, source: SourceFile, run_name: str | None,
                    fmt: ResultFormat, advance: Callable[[int], None]) -> FileReport:
    """Per-request results of a benchmark or simulator (or a simulator's batches)."""
    name = run_name or source.path.name.split(".")[0]
    run_id = make_run_id(name, "ingest")
    if (done := _already_ingested(warehouse, source, run_id, fmt, advance)):
        return done
    result = (read_vllm_result(source.path) if fmt == "vllm"
              else read_aiperf_records(source.path) if fmt == "aiperf"
              else read_results_csv(source.path, fmt))
    rows = _with_run_id(result.rows, run_id)
    kind = "simulation" if fmt.startswith("vidur") else "benchmark"
    with warehouse.transaction(run_id, source_path=str(source.path), source_sha256=source.sha256(),
                               source_size=source.size) as commit:
        warehouse.write(commit, result.table, rows)
        warehouse.write_rows(commit, "runs", _run_row(run_id, name, kind, source, {
            "format": fmt, "source_sha256": source.sha256(), **result.run_config}, dataset=None))
        _write_quarantine(warehouse, commit, source, result.rejected)
    advance(source.size)
    return FileReport(str(source.path), run_id, "ingested", rows=rows.num_rows,
                      rejected=len(result.rejected), fmt=fmt)


def _ingest_workload_file(warehouse: Warehouse, source: SourceFile, run_name: str | None,
                          fmt: WorkloadFormat | Literal["mapped"],
                          advance: Callable[[int], None],
                          columns: ColumnMapping | None = None) -> FileReport:
    """An arrival trace (CSV or Mooncake JSONL) into ``workload_requests``."""
    name = run_name or source.path.name.split(".")[0]
    run_id = make_run_id(name, "ingest")
    if (done := _already_ingested(warehouse, source, run_id, fmt, advance)):
        return done
    result = read_workload_file(source.path, fmt, columns)
    table = _with_run_id(result.table, run_id)
    with warehouse.transaction(run_id, source_path=str(source.path), source_sha256=source.sha256(),
                               source_size=source.size) as commit:
        warehouse.write(commit, "workload_requests", table)
        config = {"format": fmt, "source_sha256": source.sha256(),
                  **({"columns": columns.columns, "arrival_unit": columns.arrival_unit}
                     if columns else {})}
        warehouse.write_rows(commit, "runs", _run_row(run_id, name, "workload", source,
                                                      config, dataset=None))
        _write_quarantine(warehouse, commit, source, result.rejected)
    advance(source.size)
    return FileReport(str(source.path), run_id, "ingested", rows=table.num_rows,
                      rejected=len(result.rejected), fmt=fmt)


def _ingest_eval_file(warehouse: Warehouse, source: SourceFile, run_name: str | None,
                      advance: Callable[[int], None]) -> FileReport:
    """A RULER prediction file: its samples, scored, into ``eval_samples``."""
    name = run_name or source.default_run_name()
    run_id = make_run_id(name, "ingest")
    if (done := _already_ingested(warehouse, source, run_id, "eval", advance)):
        return done
    result = read_eval_file(source.path, run_id, advance)
    task = task_name(source.path)
    check = summary_check(result.rows, task, source.path.parent)
    disagreements = {f"ruler_score:{task}": check} if check and check.disagreeing else {}
    with warehouse.transaction(run_id, source_path=str(source.path), source_sha256=source.sha256(),
                               source_size=source.size) as commit:
        warehouse.write_rows(commit, "eval_samples", result.rows)
        warehouse.write_rows(commit, "runs", _run_row(run_id, name, "eval", source, {
            "format": "ruler-pred"}, dataset="ruler"))
        _write_quarantine(warehouse, commit, source, result.rejected)
        _write_checks(warehouse, commit, source, disagreements)
    return FileReport(str(source.path), run_id, "ingested", rows=len(result.rows),
                      rejected=len(result.rejected), disagreements=disagreements,
                      fmt="eval")


def _ingest_run_summary(warehouse: Warehouse, source: SourceFile, run_name: str | None,
                        experiment: str | None) -> FileReport:
    """A serving run's summary JSON: kept whole, as JSON text, beside its run."""
    try:
        summary = json.loads(source.path.read_bytes())
    except ValueError as exc:
        raise InputError(f"{source.path} is not valid JSON: {exc}") from None
    if not isinstance(summary, dict):
        raise InputError(f"{source.path} holds no JSON object; a run summary is one")
    name = run_name or serving_run_name(source)
    run_id = make_run_id(name, "ingest")
    if (done := _already_ingested(warehouse, source, run_id, "summary", lambda _: None)):
        return done
    with warehouse.transaction(run_id, source_path=str(source.path),
                               source_sha256=source.sha256(),
                               source_size=source.size) as commit:
        warehouse.write_rows(commit, "run_summaries", [{
            "run_id": run_id, "experiment": experiment or name,
            "source_path": str(source.path), "summary": json.dumps(summary, sort_keys=True),
        }])
        warehouse.write_rows(commit, "runs", _run_row(run_id, name, "serving", source,
                                                 {"format": "summary"}, dataset=None))
    return FileReport(str(source.path), run_id, "ingested", rows=1, fmt="summary")


def _ingest_dsa_file(warehouse: Warehouse, source: SourceFile, first: bytes,
                     dataset: str | None, run_name: str | None, block_size: int,
                     advance: Callable[[int], None]) -> FileReport:
    fmt = detect_format(first, str(source.path))
    record = json.loads(first)
    name = (run_name or record.get("run_name") or source.sidecar.get("run_name")
            or source.default_run_name())
    run_id = make_run_id(str(name), "ingest")
    # One file of a run at a time: the string request ids it maps to dense integers, and
    # the check that its bytes are new, must see what the other files committed.
    with warehouse.run_lock(run_id):
        if (done := _already_ingested(warehouse, source, run_id, fmt, advance)):
            return done
        return _ingest_new_dsa_file(warehouse, source, fmt, record, str(name), run_id,
                                    dataset, block_size, advance)


def _ingest_new_dsa_file(warehouse: Warehouse, source: SourceFile, fmt: Format, record: dict,
                         name: str, run_id: str, dataset: str | None,
                         block_size: int, advance: Callable[[int], None]) -> FileReport:
    default_dataset = dataset or record.get("dataset") or source.sidecar.get("dataset")
    with warehouse.transaction(run_id, source_path=str(source.path),
                               source_size=source.size) as commit:
        writer = DsaWriter(
            warehouse, commit, string_ids=fmt == "nested",
            dataset=str(default_dataset or "unknown"),
            dataset_override=dataset is not None,
            block_size=int(source.sidecar.get("config", {}).get("kv_block_size_tokens")
                           or block_size),
            request_ids=_known_request_keys(warehouse, run_id),
            skip_stored=True,
        )
        result = read_dsa_file(writer, source.path, fmt, advance)
        commit.source_sha256 = source.sha256()  # hashed alongside the read
        _write_side_tables(warehouse, commit, source, str(name), fmt, result)
    return FileReport(
        str(source.path), run_id, "ingested", rows=result.rows,
        rejected=len(result.rejected), skipped=dict(result.skipped),
        disagreements=result.checks.disagreements(), fmt=fmt,
    )


def _known_request_keys(warehouse: Warehouse, run_id: str) -> dict[str, int]:
    """String request ids already mapped to integers in earlier files of this run."""
    files = warehouse.run_files(run_id, "requests")
    if not files:
        return {}
    table = warehouse.read_files(files, columns=["run_id", "request_id", "request_key"])
    table = table.filter(pc.and_(pc.equal(table["run_id"], run_id),
                                 pc.is_valid(table["request_key"])))
    return dict(zip(table["request_key"].to_pylist(), table["request_id"].to_pylist(),
                    strict=True))


def _write_side_tables(warehouse: Warehouse, commit: Commit, source: SourceFile,
                       run_name: str, fmt: str, result: DsaFileResult) -> None:
    run_id = commit.run_id
    sidecar = source.sidecar
    datasets = sorted(result.datasets)
    config = {"format": fmt, "block_sizes": sorted(result.block_sizes),
              **({"config": sidecar["config"]} if "config" in sidecar else {})}
    warehouse.write_rows(commit, "runs", _run_row(
        run_id, run_name, "dsa", source, config,
        dataset=datasets[0] if len(datasets) == 1 else ",".join(datasets) or None,
        rank=result.first_record.get("rank"),
        world_size=result.first_record.get("world_size")))
    for dataset in datasets:
        rows = [
            {"run_id": run_id, "request_id": rid, **vars(info)}
            for rid, info in sorted(result.requests.items()) if info.dataset == dataset
        ]
        warehouse.write_rows(commit, "requests", rows)
    _write_quarantine(warehouse, commit, source, result.rejected)
    _write_checks(warehouse, commit, source, result.checks.disagreements())


def _run_row(run_id: str, run_name: str, kind: str, source: SourceFile, config: dict, *,
             dataset: str | None, rank: int | None = None,
             world_size: int | None = None) -> list[dict]:
    """The ``runs`` row of an ingested file (its sidecar says what the tracer recorded)."""
    sidecar = source.sidecar
    return [run_row(run_id, run_name, kind, source="ingest", collector_config=config,
                    dataset=dataset, dataset_variant=sidecar.get("dataset_variant"),
                    model=sidecar.get("model"), model_config=sidecar.get("model_config"),
                    rank=rank, world_size=world_size,
                    started_at=_parse_time(sidecar.get("started_at")))]


def _write_quarantine(warehouse: Warehouse, commit: Commit, source: SourceFile,
                      rejected: list[BadLine]) -> None:
    if rejected:
        warehouse.write_rows(commit, "quarantine", quarantine_rows(
            commit.run_id, str(source.path), commit.source_sha256, rejected))


def _write_checks(warehouse: Warehouse, commit: Commit, source: SourceFile,
                  disagreements: dict[str, StatCheck]) -> None:
    """Statistics a source stated that disagree with kvtrace's, into ``ingest_checks``."""
    if disagreements:
        warehouse.write_rows(commit, "ingest_checks", [
            {"run_id": commit.run_id, "source_path": str(source.path), "statistic": name,
             "rows_checked": tally.checked, "rows_disagreeing": tally.disagreeing,
             "first_line": tally.first_line, "source_value": tally.source_value,
             "recomputed_value": tally.recomputed}
            for name, tally in sorted(disagreements.items())
        ])


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
