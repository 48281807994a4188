"""Read RULER prediction files: one ``<task>.jsonl`` per task, one line per sample.

A line holds ``index``, ``input``, ``outputs`` (the references), ``pred`` (the model's
answer, absent or null when the model gave none), ``others``, ``truncation`` and
``length`` (the context length in tokens).  Each becomes an ``eval_samples`` row scored
the RULER way (`kvtrace.warehouse.rows.eval`); a line that is not such a record goes to
the quarantine.  When RULER's ``summary.csv`` sits beside the files, its score of the
task is checked against the recomputed one (``ingest_checks``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvtrace.ingest._lines import json_records, json_type, raw_text
from kvtrace.ingest._sources import printable
from kvtrace.ingest._values import BadValue, whole_number
from kvtrace.ingest.family import Advance, FileRows, IngestOptions
from kvtrace.ingest.probe import Probe
from kvtrace.ingest.sink import FileSink
from kvtrace.warehouse.rows.dsa_checks import StatCheck
from kvtrace.warehouse.rows.eval import eval_row
from kvtrace.warehouse.rows.rejects import BadLine
from kvtrace.warehouse.schema.eval import EVAL_SAMPLES


def is_eval_record(record: dict[str, Any]) -> bool:
    """A RULER prediction line: a ``pred`` beside the reference ``outputs``."""
    return "outputs" in record and ("pred" in record or "prediction" in record)


def task_name(path: Path) -> str:
    """``niah_single_1`` from ``niah_single_1.jsonl`` (or ``.jsonl.gz``)."""
    return printable(path.name.split(".")[0])


@dataclass
class EvalFileResult:
    rows: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[BadLine] = field(default_factory=list)


def read_eval_file(
    path: Path, run_id: str, progress: Callable[[int], None] | None = None
) -> EvalFileResult:
    """Score every sample of a RULER prediction file."""
    task = task_name(path)
    result = EvalFileResult()
    for line_no, text, record in json_records(path, result.rejected, progress):
        try:
            result.rows.append(_row(record, run_id, task, line_no))
        except BadValue as exc:
            result.rejected.append(BadLine(line_no, f"bad value: {exc}", raw_text(text)))
    return result


class _BadSample(BadValue):
    pass


def _row(record: object, run_id: str, task: str, line_no: int) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise _BadSample(f"expected a JSON object, got {json_type(record)}")
    outputs = record.get("outputs")
    if isinstance(outputs, str):
        outputs = [outputs]
    if not isinstance(outputs, list) or not all(isinstance(o, (str, int)) for o in outputs):
        raise _BadSample("outputs must be a list of reference strings")
    prediction = record.get("pred", record.get("prediction"))
    if prediction is not None and not isinstance(prediction, str):
        raise _BadSample(f"pred must be a string, got {prediction!r}"[:200])
    index = whole_number("index", record.get("index", line_no - 1), minimum=None)
    length = record.get("length")
    length = None if length is None else whole_number("length", length)
    return eval_row(
        run_id=run_id,
        task=task,
        sample_index=index,
        prediction=prediction,
        references=[str(o) for o in outputs],
        context_length=length,
    )


def ruler_summary_scores(folder: Path) -> dict[str, float]:
    """RULER's own per-task scores from ``summary.csv`` beside the prediction files.

    RULER writes it transposed: a ``Tasks`` row of task names and a ``Score`` row of
    scores (mean x 100).  An absent or unreadable file gives no scores.
    """
    import csv

    try:
        rows = {
            row[0]: row[1:]
            for row in csv.reader((folder / "summary.csv").read_text().splitlines())
            if row
        }
    except (OSError, UnicodeDecodeError):
        return {}
    scores = {}
    for task, value in zip(rows.get("Tasks", []), rows.get("Score", []), strict=False):
        try:
            scores[task] = float(value)
        except ValueError:
            continue
    return scores


def summary_check(rows: list[dict[str, Any]], task: str, folder: Path) -> StatCheck | None:
    """How RULER's summary.csv score of ``task`` compares with the recomputed one (None
    when the summary does not list the task)."""
    stated = ruler_summary_scores(folder).get(task)
    if stated is None or not rows:
        return None
    recomputed = round(sum(row["score"] for row in rows) / len(rows) * 100, 2)
    disagrees = abs(recomputed - stated) > 0.01
    return StatCheck(
        checked=1,
        disagreeing=int(disagrees),
        first_line=None,
        source_value=stated,
        recomputed=recomputed,
    )


class EvalFamily:
    """RULER prediction files, scored into ``eval_samples``."""

    name = "eval"
    reads = "RULER predictions (pred, outputs)"
    tables = (EVAL_SAMPLES.name,)
    reads_only_record_keys = False

    def recognise(self, probe: Probe) -> str | None:
        record = probe.first_record
        return "ruler-pred" if record is not None and is_eval_record(record) else None

    def forced_format(self, probe: Probe) -> str:
        return "ruler-pred"

    def run_name(self, probe: Probe, fmt: str, options: IngestOptions) -> str:
        return options.run_name or probe.source.default_run_name()

    def read(
        self, probe: Probe, fmt: str, sink: FileSink, options: IngestOptions, advance: Advance
    ) -> FileRows:
        result = read_eval_file(probe.path, sink.run_id, advance)
        task = task_name(probe.path)
        check = summary_check(result.rows, task, probe.path.parent)
        stored = sink.write_rows("eval_samples", result.rows)
        return FileRows(
            "eval",
            rows=stored,
            rejected=result.rejected,
            dataset="ruler",
            checks={f"ruler_score:{task}": check} if check and check.disagreeing else {},
        )


EVAL = EvalFamily()
