"""Read saved Prometheus scrapes into ``engine_metrics``, the rows a live
``kvtrace collect metrics`` writes (`kvtrace.warehouse.rows.engine_metrics`).

Two formats, told by content:

* ``prom``: one scrape, the exposition text an endpoint answered (``curl -s
  http://gpu0:8000/metrics > gpu0-20261129T041500Z.prom``), recognised by a first line
  ``# HELP`` or ``# TYPE`` whatever the file's name.  Its time: each sample's own
  timestamp where it has one; else the UTC time in the file's name
  (``YYYYMMDDTHHMMSSZ``, as ``date -u +%Y%m%dT%H%M%SZ`` writes it); else the file's
  modification time.  Its worker is the name before that time (``gpu0``), else the name
  up to its first dot.  Bad text is one sentence, and nothing of the file is stored.
* ``jsonl``: scrapes one a line, ``{"t": <Unix seconds>, "worker": "gpu0", "body":
  "<exposition text>"}``, optionally ``"duration_s"``; a failed scrape is ``{"t", "worker",
  "error"}``.  ``collect metrics --save`` writes these, and so does ``curl -s URL | jq
  -Rsc --arg w gpu0 '{t: now, worker: $w, body: .}' >> scrapes.jsonl``.  Each line gives
  what the live scrape gave (``up``, ``scrape_samples_scraped``, ``scrape_duration_seconds``
  when given, ``kvtrace_scrape_error``); a line that is not a scrape goes to the
  quarantine and the others are stored.

``t_s`` counts from the run's first scrape: the earliest the run held when the file was
read, or the file's own.  A ``prom`` file's run is its folder (a folder of scrapes is one
run), a ``jsonl`` file's its name up to the first dot; ``--run-name`` overrides both.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc

from kvtrace.errors import InputError
from kvtrace.ingest._lines import json_records, json_type, raw_text, read_content
from kvtrace.ingest._sources import printable
from kvtrace.ingest.family import Advance, FileRows, IngestOptions
from kvtrace.ingest.probe import Probe
from kvtrace.ingest.sink import FileSink
from kvtrace.warehouse.rows.engine_metrics import (
    ExpositionError,
    MetricRows,
    Samples,
    parse_exposition,
    scrape_rows,
)
from kvtrace.warehouse.rows.rejects import BadLine
from kvtrace.warehouse.schema.engine_metrics import ENGINE_METRICS

_STAMP = re.compile(r"[-_.]?(\d{8}T\d{6}(?:\.\d{1,6})?Z)")
_BATCH_ROWS = 200_000  # rows handed to the sink at a time
_LATEST = 253402300800.0  # the year 10000, in Unix seconds


class ScrapeError(ValueError):
    """A saved scrape that cannot be read."""


class PrometheusFamily:
    """Saved Prometheus scrapes, into ``engine_metrics``."""

    name = "metrics"
    reads = "Prometheus scrapes (# HELP / # TYPE text, or JSONL of t, worker, body)"
    tables = (ENGINE_METRICS.name,)
    reads_only_record_keys = False

    def recognise(self, probe: Probe) -> str | None:
        first = probe.head.lstrip().split(b"\n", 1)[0]
        if first.startswith((b"# HELP ", b"# TYPE ")):
            return "prom"
        record = probe.first_record
        if record is None or not {"t", "worker"} <= record.keys():
            return None
        return "jsonl" if "body" in record or "error" in record else None

    def forced_format(self, probe: Probe) -> str:
        return "jsonl" if probe.is_json_document else "prom"

    def run_name(self, probe: Probe, fmt: str, options: IngestOptions) -> str:
        if options.run_name:
            return options.run_name
        if fmt == "prom":
            return printable(probe.path.resolve().parent.name) or "metrics"
        return printable(probe.path.name.split(".")[0])

    def read(
        self, probe: Probe, fmt: str, sink: FileSink, options: IngestOptions, advance: Advance
    ) -> FileRows:
        label = options.experiment or self.run_name(probe, fmt, options)
        rejected: list[BadLine] = []
        batches = _prom_rows(probe) if fmt == "prom" else _jsonl_rows(probe, rejected, advance)
        origin = _run_origin(sink)
        stored = 0
        target = sink.open_file(ENGINE_METRICS.name)
        try:
            for rows, first_scrape in batches:
                if origin is None or first_scrape < origin:
                    origin = first_scrape
                stored += target.append(rows.table(origin, label))
        finally:
            target.close()
        return FileRows("serving", rows=stored, rejected=rejected, config={"experiment": label})


def _run_origin(sink: FileSink) -> float | None:
    """The earliest scrape the run holds already (Unix seconds), or None."""
    files = sink.warehouse.run_files(sink.run_id, ENGINE_METRICS.name)
    if not files:
        return None
    stored = sink.warehouse.read_key_columns(files, ["run_id", "ts", "t_s"])
    mine = stored.filter(pc.equal(stored["run_id"].cast(pa.string()), sink.run_id))
    if mine.num_rows == 0:
        return None
    # ts - t_s is the origin the run's rows count from
    seconds = pc.divide(mine["ts"].cast(pa.int64()).cast(pa.float64()), 1e6)
    return float(pc.min(pc.subtract(seconds, mine["t_s"])).as_py())


def _prom_rows(probe: Probe) -> Iterator[tuple[MetricRows, float]]:
    """The one scrape of a ``prom`` file."""
    try:
        text = read_content(probe.path).decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{probe.path} is not UTF-8 text") from None
    try:
        samples = parse_exposition(text.removeprefix("\ufeff"))
    except ExpositionError as exc:
        raise InputError(f"{probe.path}: {exc}") from None
    if not len(samples):
        raise InputError(f"{probe.path} holds no samples, only comments")
    worker, scraped_at = _name_and_time(probe)
    own = [s for s in samples.stamp if s is not None]
    if len(own) == len(samples):  # every sample has its time: the file's does not matter
        scraped_at = min(own)
    rows = MetricRows()
    rows.add(worker, scraped_at, samples)
    yield rows, scraped_at


def _name_and_time(probe: Probe) -> tuple[str, float]:
    """A ``prom`` file's worker and scrape time, from its name, else its mtime."""
    stem = printable(probe.path.name.split(".")[0])
    match = _STAMP.search(probe.path.name)
    if match is None:
        return stem, probe.path.stat().st_mtime
    stamp = match[1]
    when = datetime.strptime(stamp, "%Y%m%dT%H%M%S.%fZ" if "." in stamp else "%Y%m%dT%H%M%SZ")
    worker = printable(probe.path.name[: match.start()]) or stem
    return worker, when.replace(tzinfo=timezone.utc).timestamp()


def _jsonl_rows(
    probe: Probe, rejected: list[BadLine], advance: Advance
) -> Iterator[tuple[MetricRows, float]]:
    """The scrapes of a ``jsonl`` file, in batches, each with the file's first scrape."""
    first = min(
        (t for _, _, record in json_records(probe.path, []) if (t := _time_of(record)) is not None),
        default=None,
    )
    rows = MetricRows()
    for line_no, text, record in json_records(probe.path, rejected, advance):
        try:
            worker, at, samples = _scrape(record)
        except ScrapeError as exc:
            rejected.append(BadLine(line_no, f"not a saved scrape: {exc}", raw_text(text)))
            continue
        rows.add(worker, at, samples)
        if rows.rows >= _BATCH_ROWS:
            yield rows, first if first is not None else at
            rows = MetricRows()
    if rows.rows:
        yield rows, first if first is not None else rows.first_scrape or 0.0


def _time_of(record: object) -> float | None:
    """A record's scrape time when it has a usable one."""
    if not isinstance(record, dict):
        return None
    try:
        return _seconds(record.get("t"))
    except ScrapeError:
        return None


def _seconds(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ScrapeError(f"t must be a number of Unix seconds, got {json_type(value)}")
    if not math.isfinite(value) or abs(value) >= _LATEST:
        raise ScrapeError(f"t is out of range: {value}")
    return float(value)


def _scrape(record: object) -> tuple[str, float, Samples]:
    """One saved scrape's worker, time and rows."""
    if not isinstance(record, dict):
        raise ScrapeError(f"expected a JSON object, got {json_type(record)}")
    at = _seconds(record.get("t"))
    worker = record.get("worker")
    if not isinstance(worker, str) or not worker:
        raise ScrapeError("worker must be a non-empty string")
    duration = record.get("duration_s")
    if duration is not None and (
        isinstance(duration, bool) or not isinstance(duration, (int, float)) or duration < 0
    ):
        raise ScrapeError("duration_s must be a number of seconds")
    error, body = record.get("error"), record.get("body")
    if error is not None:
        if not isinstance(error, str):
            raise ScrapeError(f"error must be a string, got {json_type(error)}")
        return worker, at, scrape_rows(None, duration, error)
    if not isinstance(body, str):
        raise ScrapeError(f"body must be the exposition text, got {json_type(body)}")
    try:
        samples = parse_exposition(body)
    except ExpositionError as exc:
        raise ScrapeError(str(exc)) from None
    return worker, at, scrape_rows(samples, duration)


PROMETHEUS = PrometheusFamily()
