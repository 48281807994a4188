"""Rows of ``dsa_prefill`` from the prefill chunks a `DsaTracer` step counted.

Each (layer, chunk) count vector becomes one row: the positions selected at least once,
ascending, and how many of the chunk's query tokens selected each.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from kvtrace.collectors._dsa_record import HostStep
from kvtrace.warehouse.schema.dsa_prefill import DSA_PREFILL

__all__ = ["PrefillStep", "prefill_table"]


@dataclass(frozen=True)
class PrefillStep:
    """The prefill chunks of one traced step, as the writer thread receives them."""

    host: HostStep
    latency_us: float
    ts_us: float
    batch_step: int

    @property
    def records(self) -> int:
        return len(self.host.prefill_layers) * len(self.host.layout.prefill)


def prefill_table(
    steps: list[PrefillStep], *, run_id: str, dataset: str, topk: int | None
) -> pa.Table:
    """The ``dsa_prefill`` rows of ``steps``."""
    columns: dict[str, list] = {name: [] for name in DSA_PREFILL.schema.names}
    positions: list[np.ndarray] = []
    counts: list[np.ndarray] = []
    for step in steps:
        for layer, per_chunk in zip(step.host.prefill_layers, step.host.counts, strict=True):
            for part, count in zip(step.host.layout.prefill, per_chunk, strict=True):
                selected = np.flatnonzero(count).astype(np.int32)
                positions.append(selected)
                counts.append(count[selected].astype(np.int32))
                columns["request_id"].append(part.request_id)
                columns["layer_id"].append(int(layer))
                columns["query_start"].append(part.start)
                columns["query_end"].append(part.start + part.tokens)
                columns["batch_step"].append(step.batch_step)
                columns["ts_us"].append(step.ts_us)
                columns["step_latency_us"].append(step.latency_us)
    rows = len(positions)
    columns["run_id"] = [run_id] * rows
    columns["dataset"] = [dataset] * rows
    columns["topk"] = [topk] * rows
    arrays = {
        name: pa.array(values, DSA_PREFILL.schema.field(name).type)
        for name, values in columns.items()
        if name not in ("selected_pos", "select_count")
    }
    arrays["selected_pos"] = _lists(positions)
    arrays["select_count"] = _lists(counts)
    return pa.table([arrays[name] for name in DSA_PREFILL.schema.names], schema=DSA_PREFILL.schema)


def _lists(parts: list[np.ndarray]) -> pa.Array:
    offsets = np.concatenate(([0], np.cumsum([len(p) for p in parts]))).astype(np.int32)
    values = np.concatenate(parts) if parts else np.zeros(0, np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, pa.int32()))
