"""Read Vidur's operator profiles into ``operator_profiles``.

Vidur (github.com/microsoft/vidur, ``vidur/profiling/``) profiles each operator of a
model on one GPU and keeps the times as CSV files, told apart here by their header:

- ``mlp``: ``data/profiling/compute/<gpu>/<org>/<model>/mlp.csv``: one row per (tokens
  of the iteration, tensor-parallel degree) with the model's shape (``n_head``,
  ``n_kv_head``, ``n_embd``, ``n_expanded_embd``, ``vocab_size``, ``use_gated_mlp``,
  ``num_tokens``, ``num_tensor_parallel_workers``) and ``time_stats.<op>.<stat>`` for the
  token-level operators (``emb``, ``input_layernorm``, ``attn_pre_proj``, ``attn_rope``,
  ``attn_post_proj``, ``post_attention_layernorm``, ``mlp_up_proj``, ``mlp_act``,
  ``mlp_down_proj``, ``add``), written by ``vidur/profiling/mlp/main.py``.
- ``attention``: ``.../attention.csv``: one row per (``batch_size``,
  ``prefill_chunk_size``, ``kv_cache_size``, ``is_prefill``) with ``n_embd``, ``n_q_head``,
  ``n_kv_head``, ``block_size``, ``max_model_len`` and ``attention_backend``; a prefill row
  times ``attn_prefill`` (batch 1), a decode row ``attn_decode`` (prefill_chunk_size 0),
  written by ``vidur/profiling/attention/main.py``.
- ``collectives``: ``data/profiling/network/<system>/{all_reduce,send_recv}.csv``: a
  pandas index column, ``time_stats.<all_reduce|send_recv>.<stat>``, ``rank``,
  ``num_workers``, ``size`` (bytes: the profiler writes twice its FP16 element count),
  ``collective``, ``devices_per_node``, ``max_devices_per_node``
  (``vidur/profiling/collectives/``).
- ``cpu_overheads``: ``cpu_overheads.csv``: ``<op>_mean`` and ``<op>_median`` of the
  engine's CPU steps (``schedule``, ``sampler_e2e``, ``prepare_inputs_e2e``,
  ``process_model_outputs``, ...), ``ray_comm_time_mean``, ``model_name``, ``batch_size``,
  ``tensor_parallel_degree`` (``vidur/profiling/cpu_overhead/``).

The statistics (min, max, mean, median, std of the repeated runs) are milliseconds: the
profiler's timers convert to ms.  A row's operator with no time at all (a decode row's
``attn_prefill``) is no row of the table.  The GPU or network system and the model come
from the folders (``compute/<gpu>/<org>/<model>/``, ``network/<system>/``,
``cpu_overhead/<system>/<org>/<model>/``; else the folder the file lies in names the
device), and ``model_name`` names a CPU-overhead row's model.  A value that is not a
number, a count that is not whole, a negative size or time, or a flag that is not
True/False sends its row to the quarantine with the reason.  Files are read from
Vidur's commit 7d47513 (2024-11-19) and its earlier ``data/profiling/<gpu>/`` layout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvtrace.errors import InputError
from kvtrace.ingest._csv_columns import CsvColumns, RowReasons, numbers, read_csv_columns
from kvtrace.ingest._sources import printable
from kvtrace.ingest.family import Advance, FileRows, IngestOptions
from kvtrace.ingest.probe import Probe
from kvtrace.ingest.sink import FileSink
from kvtrace.warehouse.rows.rejects import BadLine
from kvtrace.warehouse.schema.operator_profiles import OPERATOR_PROFILES

ProfileFormat = Literal["mlp", "attention", "collectives", "cpu_overheads"]
STATS = ("min", "max", "mean", "median", "std")
_TIME_STATS = re.compile(r"^time_stats\.(\w+)\.(min|max|mean|median|std)$")
_CPU_STAT = re.compile(r"^(\w+)_(mean|median)$")
_PLACES = ("compute", "network", "cpu_overhead")  # the folders that name a device next


@dataclass(frozen=True)
class Parameter:
    """A size or shape column: its name in the table, in the CSV, and what it holds."""

    column: str
    source: str
    kind: Literal["int", "bool", "text"] = "int"
    required: bool = True


PARAMETERS: dict[ProfileFormat, tuple[Parameter, ...]] = {
    "mlp": (
        Parameter("n_embd", "n_embd"),
        Parameter("n_head", "n_head"),
        Parameter("n_kv_head", "n_kv_head"),
        Parameter("n_expanded_embd", "n_expanded_embd"),
        Parameter("vocab_size", "vocab_size"),
        Parameter("use_gated_mlp", "use_gated_mlp", "bool"),
        Parameter("tensor_parallel", "num_tensor_parallel_workers"),
        Parameter("num_tokens", "num_tokens"),
    ),
    "attention": (
        Parameter("n_embd", "n_embd"),
        Parameter("n_head", "n_q_head"),
        Parameter("n_kv_head", "n_kv_head"),
        Parameter("tensor_parallel", "num_tensor_parallel_workers"),
        Parameter("batch_size", "batch_size"),
        Parameter("prefill_chunk_size", "prefill_chunk_size"),
        Parameter("kv_cache_size", "kv_cache_size"),
        Parameter("is_prefill", "is_prefill", "bool"),
        Parameter("block_size", "block_size", required=False),
        Parameter("max_model_len", "max_model_len", required=False),
        Parameter("backend", "attention_backend", "text", required=False),
    ),
    "collectives": (
        Parameter("size_bytes", "size"),
        Parameter("num_workers", "num_workers"),
        Parameter("devices_per_node", "devices_per_node", required=False),
        Parameter("max_devices_per_node", "max_devices_per_node", required=False),
        Parameter("rank", "rank", required=False),
    ),
    "cpu_overheads": (
        Parameter("model", "model_name", "text"),
        Parameter("batch_size", "batch_size"),
        Parameter("tensor_parallel", "tensor_parallel_degree"),
    ),
}
_TRUE, _FALSE = ("true", "1"), ("false", "0")


def detect_profile(header: list[str]) -> ProfileFormat | None:
    """Which of Vidur's profiles a CSV header is, or None."""
    names = set(header)
    timed = any(_TIME_STATS.match(name) for name in header)
    if timed and {"num_tokens", "n_expanded_embd", "num_tensor_parallel_workers"} <= names:
        return "mlp"
    if timed and {"prefill_chunk_size", "kv_cache_size", "is_prefill", "n_q_head"} <= names:
        return "attention"
    if timed and {"collective", "size", "num_workers"} <= names:
        return "collectives"
    cpu = {"model_name", "tensor_parallel_degree", "batch_size"} <= names
    if cpu and any(name.endswith("_median") for name in header):
        return "cpu_overheads"
    return None


def operator_columns(header: list[str], fmt: ProfileFormat) -> dict[str, dict[str, str]]:
    """Each operator's statistics and the CSV columns that hold them, in header order."""
    found: dict[str, dict[str, str]] = {}
    pattern = _CPU_STAT if fmt == "cpu_overheads" else _TIME_STATS
    for name in header:
        if (match := pattern.match(name)) is not None:
            found.setdefault(match[1], {})[match[2]] = name
    return found


def profile_place(path: Path) -> tuple[str | None, str | None]:
    """The device and the model the file's folders name (as kvtrace shows names)."""
    folders = [printable(folder) for folder in path.parent.parts]
    for i in range(len(folders) - 1, -1, -1):
        if folders[i] in _PLACES and i + 1 < len(folders):
            return folders[i + 1], "/".join(folders[i + 2 :]) or None
    return (folders[-1] if folders and folders[-1] not in ("", "/") else None), None


def read_profile(
    path: Path, fmt: ProfileFormat, header: list[str]
) -> tuple[pa.Table, list[BadLine]]:
    """The ``operator_profiles`` rows of one file (run_id empty), and its bad rows."""
    params = [p for p in PARAMETERS[fmt] if p.required or p.source in header]
    missing = [p.source for p in params if p.source not in header]
    if missing:
        raise InputError(f"{path}: a Vidur {fmt} profile needs the column {missing[0]}")
    operators = operator_columns(header, fmt)
    stat_sources = [source for stats in operators.values() for source in stats.values()]
    types = {p.source: pa.int64() for p in params if p.kind == "int"}
    types |= {source: pa.float64() for source in stat_sources}
    read = read_csv_columns(path, [p.source for p in params] + stat_sources, types)
    reasons = RowReasons(read.table.num_rows)
    values = {p.column: _parameter(read.table[p.source], p, reasons) for p in params}
    times = {source: _time(read.table[source], source, reasons) for source in stat_sources}
    keep = reasons.ok
    device, model = profile_place(path)
    parts = [
        _operator_rows(fmt, operator, stats, times, values, keep, read, device, model)
        for operator, stats in operators.items()
    ]
    rows = pa.concat_tables(parts) if parts else OPERATOR_PROFILES.schema.empty_table()
    return rows, _rejected(read, reasons)


def _parameter(column: pa.ChunkedArray, parameter: Parameter, reasons: RowReasons) -> np.ndarray:
    name = parameter.source
    if parameter.kind == "text":
        return np.asarray(column.to_pylist(), dtype=object)
    if parameter.kind == "bool":
        text = pc.utf8_lower(pc.utf8_trim_whitespace(column.cast(pa.string())))
        flags = np.asarray(pc.fill_null(pc.is_in(text, pa.array(_TRUE)), False))
        known = flags | np.asarray(pc.fill_null(pc.is_in(text, pa.array(_FALSE)), False))
        reasons.note(~known, f"{name} is not True or False")
        return flags
    number = numbers(column, name, reasons, pa.int64())
    reasons.note(number < 0, f"{name} is negative")
    return number


def _time(column: pa.ChunkedArray, name: str, reasons: RowReasons) -> np.ndarray:
    """A statistic's values in ms, NaN where the file leaves it empty (an operator the
    row does not time); a value that is there but not a number is the row's reason."""
    empty = np.asarray(
        pc.fill_null(pc.equal(pc.utf8_trim_whitespace(column.cast(pa.string())), ""), True)
    )
    own = RowReasons(len(column))
    values = numbers(column, name, own, pa.float64())
    for code in range(1, len(own.texts)):
        reasons.note((own.codes == code) & ~empty, own.texts[code])
    reasons.note(~empty & (values < 0), f"{name} is negative")
    return values


def _operator_rows(
    fmt: ProfileFormat,
    operator: str,
    stats: dict[str, str],
    times: dict[str, np.ndarray],
    values: dict[str, np.ndarray],
    keep: np.ndarray,
    read: CsvColumns,
    device: str | None,
    model: str | None,
) -> pa.Table:
    """One operator's rows: the file's good rows that give it any time."""
    stat_values = {stat: times[source] for stat, source in stats.items()}
    timed = keep & np.any([~np.isnan(v) for v in stat_values.values()], axis=0)
    n = int(timed.sum())
    out: dict[str, pa.Array] = {
        "source": pa.repeat(pa.scalar(fmt), n),
        "device": pa.repeat(pa.scalar(device, pa.string()), n),
        "model": pa.repeat(pa.scalar(model, pa.string()), n),
        "row_idx": pa.array(read.line_no[timed] - 2, pa.int64()),
        "operator": pa.repeat(pa.scalar(operator), n),
    }
    for column, array in values.items():
        picked = array[timed]
        out[column] = pa.array(
            picked.tolist() if picked.dtype == object else picked, from_pandas=True
        )
    for stat in STATS:
        if stat in stat_values:
            out[f"time_{stat}_ms"] = pa.array(stat_values[stat][timed], from_pandas=True)
    schema = OPERATOR_PROFILES.schema
    return pa.table(
        {f.name: out[f.name].cast(f.type) if f.name in out else pa.nulls(n, f.type) for f in schema}
    )


def _rejected(read: CsvColumns, reasons: RowReasons) -> list[BadLine]:
    bad = [
        BadLine(
            int(read.line_no[row]), reasons.text(int(row)), read.line_text(int(read.line_no[row]))
        )
        for row in np.flatnonzero(~reasons.ok)
    ]
    return sorted(read.rejected + bad, key=lambda line: line.line_no)


class VidurProfileFamily:
    """Vidur's operator profiles (compute, network and CPU-overhead CSVs)."""

    name = "vidur-profile"
    reads = "Vidur operator profiles (time_stats.<operator>.<stat> CSV)"
    tables = (OPERATOR_PROFILES.name,)
    reads_only_record_keys = True

    def recognise(self, probe: Probe) -> str | None:
        return None if probe.is_json_document else detect_profile(probe.csv_header)

    def forced_format(self, probe: Probe) -> str:
        found = self.recognise(probe)
        if found is None:
            raise InputError(
                f"{probe.path} is not a Vidur operator profile: its header has the columns "
                "of none of mlp.csv, attention.csv, all_reduce.csv / send_recv.csv or "
                "cpu_overheads.csv"
            )
        return found

    def run_name(self, probe: Probe, fmt: str, options: IngestOptions) -> str:
        return options.run_name or probe.source.default_run_name()

    def read(
        self, probe: Probe, fmt: str, sink: FileSink, options: IngestOptions, advance: Advance
    ) -> FileRows:
        header = probe.csv_header
        rows, rejected = read_profile(probe.path, _format(fmt), header)
        stored = sink.write(OPERATOR_PROFILES.name, rows)
        device, model = profile_place(probe.path)
        place = {"device": device, "model": model} if model else {"device": device}
        return FileRows("profile", rows=stored, rejected=rejected, config={"vidur": fmt} | place)


def _format(fmt: str) -> ProfileFormat:
    for known in PARAMETERS:
        if known == fmt:
            return known
    raise InputError(f"no Vidur profile format {fmt!r}")


VIDUR_PROFILE = VidurProfileFamily()
