"""The canonical DSA columns: what every DSA source is mapped onto before it is written.

Each JSONL layout (`kvtrace.ingest.readers.dsa_formats`) and the live tracer
(`kvtrace.collectors.dsa_tracer`) hand `kvtrace.warehouse.rows.dsa_writer.DsaWriter` a batch
of these columns, one row per (request, step, layer) record; a source fills what it has
and `complete` makes the rest NULL.  The writer validates them, recomputes the statistics
and stores ``dsa_steps`` rows.  The ``src_*`` columns are the statistics a source wrote
down itself: they are never stored, only checked against the recomputed ones.
"""

from __future__ import annotations

import pyarrow as pa

from kvtrace.warehouse.schema.dsa import TIERS

__all__ = ["CANONICAL_DSA", "Columns", "complete"]

_I64, _F64, _STR = pa.int64(), pa.float64(), pa.string()

CANONICAL_DSA = pa.schema(
    [
        # identity
        ("event", _STR),  # the record's event name; rows of other events are skipped
        ("run_name", _STR),
        ("dataset", _STR),
        ("rank", _I64),
        ("world_size", _I64),
        ("request_id", _I64),  # integer request ids ...
        ("request_key", _STR),  # ... or string keys, mapped to dense integers per run
        ("is_decode", pa.bool_()),  # prefill records (false) are skipped
        ("layer_id", _I64),
        ("kv_group", _I64),  # the KV group whose query heads selected (NULL: all heads)
        ("step_idx", _I64),
        ("seq_len", _I64),  # tokens in the cache when the step selects
        ("batch_step", _I64),  # the tracer's batched step counter
        ("ts_us", _F64),  # when the step ran (microseconds since the epoch), when known
        # the selection
        ("topk", _I64),
        ("positions", pa.list_(_I64)),
        ("scores", pa.list_(pa.float32())),
        ("score_min", _F64),
        ("score_mean", _F64),
        ("score_max", _F64),
        ("block_size", _I64),
        ("step_latency_us", _F64),
        # where the blocks were served from
        *[
            field
            for tier in TIERS
            for field in (
                (f"{tier}_hit_blocks", pa.list_(_I64)),
                (f"{tier}_bytes_read", _I64),
                (f"{tier}_read_ops", _I64),
                (f"{tier}_latency_us", _F64),
            )
        ],
        # the shared prefix
        ("prefix_hit", pa.bool_()),
        ("prefix_cached_blocks", _I64),
        ("prefix_region_tokens", _I64),
        ("prefix_key", _STR),
        # the source's own statistics, checked and not stored
        ("src_count", _F64),
        ("src_offset_min", _F64),
        ("src_offset_p50", _F64),
        ("src_offset_p95", _F64),
        ("src_offset_max", _F64),
        ("src_unique_blocks", _F64),
        ("src_total_blocks", _F64),
        ("src_touched_ratio", _F64),
        ("src_tpb_mean", _F64),
        ("src_tpb_p50", _F64),
        ("src_tpb_p95", _F64),
        ("src_intersection_ratio", _F64),
    ]
)

Columns = dict[str, pa.Array | pa.ChunkedArray]


def complete(columns: Columns, rows: int) -> Columns:
    """``columns`` with every canonical column a source left out as NULL.

    A name outside the canonical set is a programming error in the source's mapping.
    """
    unknown = columns.keys() - set(CANONICAL_DSA.names)
    if unknown:
        raise ValueError(f"not canonical DSA columns: {', '.join(sorted(unknown))}")
    return {
        field.name: columns[field.name] if field.name in columns else pa.nulls(rows, field.type)
        for field in CANONICAL_DSA
    }
