"""Engine metrics: one row per sample of a scraped Prometheus text exposition."""

from __future__ import annotations

import pyarrow as pa

from kvtrace.warehouse.schema.core import TableSpec

__all__ = ["ENGINE_METRICS"]

ENGINE_METRICS = TableSpec(
    "engine_metrics",
    pa.schema(
        [
            ("run_id", pa.string()),
            ("experiment", pa.string()),  # as pool_snapshots has it; may be NULL
            ("worker_id", pa.string()),  # the endpoint's NAME, or the saved scrape's worker
            ("ts", pa.timestamp("us", tz="UTC")),  # when the scrape was taken
            ("t_s", pa.float64()),  # seconds since the run's first scrape
            ("metric", pa.string()),  # the sample's name as exposed (..._total, ..._bucket)
            ("family", pa.string()),  # its metric family's name
            ("labels", pa.string()),  # JSON object text, keys sorted, "{}" when none
            ("value", pa.float64()),
            # the family's type as prometheus_client's parser gives it: counter, gauge,
            # histogram, summary, info, stateset, gaugehistogram, unknown
            ("type", pa.string()),
        ]
    ),
    partition_by=("run_id",),
    partition_dirs=("run",),
    sort_by=("worker_id", "ts"),
    record_key=("worker_id", "ts", "metric", "labels"),
)
