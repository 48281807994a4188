"""Rows of ``engine_metrics`` from Prometheus text expositions, for the collector and
ingest alike.

An exposition is parsed by ``prometheus_client``'s text parser; every sample becomes a
row (its name as the parser gives it: a counter's samples end in ``_total``), with the
family's name and type, its labels as JSON text with sorted keys, and its value.  The
rules, the same live and from a file:

* a value that is not a finite number (NaN, +Inf, -Inf) is stored as NULL;
* a series repeated within one exposition (same name, labels and timestamp) keeps its
  first sample, as Prometheus does;
* a sample with its own timestamp is stored at that time, the others at the scrape's;
* text the parser refuses is `ExpositionError`, and none of that exposition is kept.

A scrape (live, or a saved record of one) also gives the series Prometheus adds to each
scrape: ``up``, ``scrape_duration_seconds``, ``scrape_samples_scraped`` and, on failure,
``kvtrace_scrape_error`` with the reason in its ``error`` label.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import pyarrow as pa

from kvtrace.warehouse.schema.engine_metrics import ENGINE_METRICS

__all__ = [
    "SCRAPE_ERROR",
    "ExpositionError",
    "MetricRows",
    "Samples",
    "parse_exposition",
    "scrape_rows",
]

SCRAPE_ERROR = "kvtrace_scrape_error"  # the series that says why a scrape failed
_US = 1_000_000


class ExpositionError(ValueError):
    """The text is not a Prometheus text exposition."""


@dataclass
class Samples:
    """The samples of one exposition, as columns (``stamp``: a sample's own timestamp in
    Unix seconds, else None)."""

    metric: list[str] = field(default_factory=list)
    family: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    value: list[float | None] = field(default_factory=list)
    type: list[str] = field(default_factory=list)
    stamp: list[float | None] = field(default_factory=list)
    non_finite: int = 0  # values stored as NULL
    repeated: int = 0  # samples left out: their series came earlier in the exposition

    def __len__(self) -> int:
        return len(self.metric)

    def add(self, metric: str, family: str, labels: str, value: float | None, kind: str) -> None:
        """One sample at the scrape's time."""
        self.metric.append(metric)
        self.family.append(family)
        self.labels.append(labels)
        self.value.append(value)
        self.type.append(kind)
        self.stamp.append(None)


def labels_text(labels: dict[str, str]) -> str:
    """Labels as stored: a JSON object with sorted keys, ``{}`` when none."""
    return json.dumps(labels, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def parse_exposition(text: str) -> Samples:
    """Every sample of a Prometheus text exposition, or of an OpenMetrics one (it ends in
    ``# EOF``); `ExpositionError` when the parser refuses the text (one sentence, naming
    what it could not read)."""
    from prometheus_client import parser as text_format
    from prometheus_client.openmetrics import parser as openmetrics

    # OpenMetrics types a counter's samples only with its own parser
    parse = openmetrics if text.rstrip().endswith("# EOF") else text_format

    samples = Samples()
    seen: set[tuple[str, str, float | None]] = set()
    try:
        for family in parse.text_string_to_metric_families(text):
            for sample in family.samples:
                labels = labels_text(sample.labels)
                stamp = _stamp(sample.timestamp)
                key = (sample.name, labels, stamp)
                if key in seen:
                    samples.repeated += 1
                    continue
                seen.add(key)
                number = float(sample.value)
                value = number if math.isfinite(number) else None
                samples.non_finite += value is None
                created = sample.name == f"{family.name}_created"
                samples.metric.append(sample.name)
                # a creation time is a gauge family of its own, as the text format has it
                samples.family.append(sample.name if created else family.name)
                samples.labels.append(labels)
                samples.value.append(value)
                samples.type.append("gauge" if created else family.type)
                samples.stamp.append(stamp)
    except (ValueError, TypeError, IndexError) as exc:
        raise ExpositionError(_refusal(exc)) from None
    return samples


def _stamp(timestamp: object) -> float | None:
    """A sample's own timestamp in Unix seconds (the parser gives seconds), or None."""
    if timestamp is None:
        return None
    seconds = float(timestamp)  # type: ignore[arg-type]
    if not math.isfinite(seconds) or abs(seconds) >= 253402300800:  # past the year 9999
        raise ValueError(f"sample timestamp out of range: {timestamp}")
    return seconds


def _refusal(exc: Exception) -> str:
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"not Prometheus text exposition format: {detail}"[:300]


def scrape_rows(
    samples: Samples | None, duration_s: float | None, error: str | None = None
) -> Samples:
    """A scrape's rows: its samples (None: it failed, for ``error``) and the series
    Prometheus adds to every scrape: ``up``, ``scrape_duration_seconds`` (when known),
    ``scrape_samples_scraped`` (the samples exposed, repeats included) or, for a failed
    scrape, ``kvtrace_scrape_error`` with the reason in its ``error`` label."""
    exposed = None if samples is None else len(samples) + samples.repeated
    rows = samples if samples is not None else Samples()
    rows.add("up", "up", "{}", 0.0 if exposed is None else 1.0, "gauge")
    if duration_s is not None:
        rows.add("scrape_duration_seconds", "scrape_duration_seconds", "{}", duration_s, "gauge")
    if exposed is not None:
        rows.add("scrape_samples_scraped", "scrape_samples_scraped", "{}", exposed, "gauge")
    else:
        reason = labels_text({"error": error or "the scrape failed"})
        rows.add(SCRAPE_ERROR, SCRAPE_ERROR, reason, 1.0, "gauge")
    return rows


class MetricRows:
    """Rows of ``engine_metrics`` gathered scrape by scrape, as columns; `table` turns
    them into Arrow (``run_id`` empty: the sink or the collector fills it in)."""

    def __init__(self) -> None:
        self._worker: list[str] = []
        self._ts_us: list[int] = []
        self._samples: list[Samples] = []
        self.rows = 0
        self.first_scrape: float | None = None  # the earliest scrape's time (Unix seconds)

    def add(self, worker_id: str, scraped_at: float, samples: Samples) -> None:
        """The samples of one scrape of ``worker_id`` taken at ``scraped_at`` (Unix
        seconds); samples with their own timestamp keep it."""
        at = round(scraped_at * _US)
        if self.first_scrape is None or scraped_at < self.first_scrape:
            self.first_scrape = scraped_at
        self._worker.extend([worker_id] * len(samples))
        self._ts_us.extend(at if s is None else round(s * _US) for s in samples.stamp)
        self._samples.append(samples)
        self.rows += len(samples)

    def table(self, origin: float, experiment: str | None, run_id: str = "") -> pa.Table:
        """The rows, ``t_s`` counted from ``origin`` (Unix seconds), in the table's order."""
        ts = pa.array(self._ts_us, pa.int64())
        columns = {
            "run_id": pa.repeat(pa.scalar(run_id), self.rows),
            "experiment": pa.repeat(pa.scalar(experiment, pa.string()), self.rows),
            "worker_id": pa.array(self._worker, pa.string()),
            "ts": ts.cast(pa.timestamp("us", tz="UTC")),
            "t_s": pa.array([(t - round(origin * _US)) / _US for t in self._ts_us], pa.float64()),
            "metric": pa.array([m for s in self._samples for m in s.metric], pa.string()),
            "family": pa.array([f for s in self._samples for f in s.family], pa.string()),
            "labels": pa.array([x for s in self._samples for x in s.labels], pa.string()),
            "value": pa.array([v for s in self._samples for v in s.value], pa.float64()),
            "type": pa.array([k for s in self._samples for k in s.type], pa.string()),
        }
        table = pa.table(columns, schema=ENGINE_METRICS.schema)
        return table.sort_by([(name, "ascending") for name in ENGINE_METRICS.sort_by])
