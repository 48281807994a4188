"""Read merge-numerics records: how far a chunked attention's merged output and LSE stray
from a reference, one JSONL line per (layer, chunk count, merge step).

A line holds ``chunks`` (key/value chunks merged, at least 1) and at least one of
``lse_max_diff``, ``lse_mean_diff``, ``out_max_diff``, ``out_mean_diff`` (absolute
differences against the reference, at least 0); optionally ``layer`` (absent: a kernel
test outside a model), ``merge_step`` (merges done when measured, 1 to chunks - 1;
absent: after all of them), ``method`` (the merge's name) and ``dtype``.  Each becomes a
``merge_numerics`` row; a line that is not such a record goes to the quarantine.  The
run is named as RULER prediction folders are (``--run-name``, else the folder), so a
numerics file ingested under an evaluation's run name joins its ``eval_accuracy`` by
``run_id``.
"""

from __future__ import annotations

from typing import Any

from kvtrace.ingest._lines import json_records, json_type, raw_text
from kvtrace.ingest._values import BadValue, finite_number, whole_number
from kvtrace.ingest.family import Advance, FileRows, IngestOptions
from kvtrace.ingest.probe import Probe
from kvtrace.ingest.sink import FileSink
from kvtrace.warehouse.rows.rejects import BadLine
from kvtrace.warehouse.schema.eval import MERGE_NUMERICS

DIFFERENCES = ("lse_max_diff", "lse_mean_diff", "out_max_diff", "out_mean_diff")
_LAYER_LIMIT = 2**15  # layer_id is an int16
_COUNT_LIMIT = 2**31  # chunks and merge_step are int32


def is_numerics_record(record: dict[str, Any]) -> bool:
    """A merge-numerics line: ``chunks`` beside a difference against the reference."""
    return "chunks" in record and any(name in record for name in DIFFERENCES)


def numerics_row(record: object, run_id: str) -> dict[str, Any]:
    """The ``merge_numerics`` row of one record; raises `BadValue` saying what is wrong."""
    if not isinstance(record, dict):
        raise BadValue(f"expected a JSON object, got {json_type(record)}")
    chunks = _bounded("chunks", record.get("chunks"), 1, _COUNT_LIMIT)
    differences = {
        name: finite_number(name, record[name], minimum=0.0)
        for name in DIFFERENCES
        if record.get(name) is not None
    }
    if not differences:
        raise BadValue(f"a record needs at least one of {', '.join(DIFFERENCES)}")
    step = record.get("merge_step")
    if step is not None and not 1 <= whole_number("merge_step", step) <= chunks - 1:
        raise BadValue(f"merge_step must lie in 1..chunks - 1 ({chunks - 1}), got {step!r}")
    layer = record.get("layer")
    return {
        "run_id": run_id,
        "layer_id": None if layer is None else _bounded("layer", layer, 0, _LAYER_LIMIT),
        "chunks": chunks,
        "merge_step": None if step is None else int(step),
        "method": _text("method", record.get("method")),
        "dtype": _text("dtype", record.get("dtype")),
        **differences,
    }


def _bounded(name: str, value: object, low: int, limit: int) -> int:
    """A whole number from ``low`` to below ``limit``."""
    number = whole_number(name, value, minimum=low)
    if number >= limit:
        raise BadValue(f"{name} is out of range: {value!r}"[:200])
    return number


def _text(name: str, value: object) -> str | None:
    """An optional string field."""
    if value is not None and not isinstance(value, str):
        raise BadValue(f"{name} must be a string, got {value!r}"[:200])
    return value


class NumericsFamily:
    """Merge-numerics records, into ``merge_numerics``."""

    name = "numerics"
    reads = "merge numerics (chunks, lse_max_diff, out_max_diff)"
    tables = (MERGE_NUMERICS.name,)
    reads_only_record_keys = True

    def recognise(self, probe: Probe) -> str | None:
        record = probe.first_record
        return "numerics" if record is not None and is_numerics_record(record) else None

    def forced_format(self, probe: Probe) -> str:
        return "numerics"

    def run_name(self, probe: Probe, fmt: str, options: IngestOptions) -> str:
        return options.run_name or probe.source.default_run_name()

    def read(
        self, probe: Probe, fmt: str, sink: FileSink, options: IngestOptions, advance: Advance
    ) -> FileRows:
        rows: list[dict[str, Any]] = []
        rejected: list[BadLine] = []
        for line_no, text, record in json_records(probe.path, rejected, advance):
            try:
                rows.append(numerics_row(record, sink.run_id))
            except BadValue as exc:
                rejected.append(BadLine(line_no, f"bad value: {exc}", raw_text(text)))
        stored = sink.write_rows(MERGE_NUMERICS.name, rows)
        return FileRows("numerics", rows=stored, rejected=rejected)


NUMERICS = NumericsFamily()
