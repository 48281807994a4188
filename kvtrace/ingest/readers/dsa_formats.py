"""The two JSONL layouts of the DSA tracer and their mapping onto canonical columns.

``seed`` is the flat ``event=dsa_topk`` record of the tracer's current version;
``nested`` is its earlier layout with string request ids and ``stats`` / ``block``
objects, where ``step_idx`` counts decode steps from 1 and ``seq_len_current`` is the
position being decoded.  Both become columns of
`kvtrace.warehouse.rows.dsa_columns.CANONICAL_DSA` (what `canonical` returns), which the DSA
writer validates and stores.
"""

from __future__ import annotations

import json
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from kvtrace.errors import InputError
from kvtrace.warehouse.schema.dsa import TIERS

Format = Literal["seed", "nested"]

_I64, _F64, _STR = pa.int64(), pa.float64(), pa.string()
_POSITIONS = pa.list_(pa.int64())
_SCORES = pa.list_(pa.float32())
_STATS3 = pa.struct([("min", _F64), ("mean", _F64), ("max", _F64)])
_TPB = pa.struct([("mean", _F64), ("p50", _F64), ("p95", _F64)])
_TIER = pa.struct(
    [
        ("hit_blocks", pa.list_(_I64)),
        ("bytes_read", _I64),
        ("read_ops", _I64),
        ("latency_us", _F64),
        ("batch_size", _I64),
    ]
)
_KV_FETCH = pa.struct([(tier, _TIER) for tier in TIERS])
_PREFIX = pa.struct(
    [
        ("prefix_cache_hit", pa.bool_()),
        ("prefix_cached_blocks", _I64),
        ("prefix_key", _STR),
        ("intersection_ratio", _F64),
    ]
)

SEED_SCHEMA = pa.schema(
    [
        ("event", _STR),
        ("run_name", _STR),
        ("dataset", _STR),
        ("rank", _I64),
        ("world_size", _I64),
        ("request_id", _I64),
        ("layer_id", _I64),
        ("step_idx", _I64),
        ("seq_len_current", _I64),
        ("topk", _I64),
        ("unique_token_pos_count", _I64),
        ("offset_min", _F64),
        ("offset_p50", _F64),
        ("offset_max", _F64),
        ("block_size_tokens", _I64),
        ("unique_blocks", _I64),
        ("total_blocks_in_use", _I64),
        ("touched_block_ratio", _F64),
        ("tokens_per_touched_block", _TPB),
        ("kv_fetch", _KV_FETCH),
        ("prefix", _PREFIX),
        ("selected_token_pos", _POSITIONS),
        ("scores_topk", _SCORES),
        ("scores_stats", _STATS3),
    ]
)

NESTED_SCHEMA = pa.schema(
    [
        ("event", _STR),
        ("run_name", _STR),
        ("dataset", _STR),
        ("request_id", _STR),
        ("ts_us", _F64),
        ("seq_idx", _I64),
        ("query_pos", _I64),
        ("is_decode", pa.bool_()),
        ("layer_id", _I64),
        ("step_idx", _I64),
        ("seq_len_current", _I64),
        ("topk", _I64),
        (
            "stats",
            pa.struct(
                [
                    ("unique_token_pos_count", _I64),
                    (
                        "offset",
                        pa.struct([("min", _F64), ("max", _F64), ("p50", _F64), ("p95", _F64)]),
                    ),
                    ("score", _STATS3),
                ]
            ),
        ),
        ("selected_token_pos", _POSITIONS),
        ("topk_indices", _POSITIONS),
        ("topk_scores", _SCORES),
        (
            "block",
            pa.struct(
                [
                    ("block_size", _I64),
                    ("unique_blocks", _I64),
                    ("tokens_per_touched_block", _TPB),
                ]
            ),
        ),
        ("prefix", _PREFIX),
    ]
)

SCHEMAS: dict[Format, pa.Schema] = {"seed": SEED_SCHEMA, "nested": NESTED_SCHEMA}


def detect_format(first_line: bytes, source: str) -> Format:
    """Tell the layout of a DSA trace from its first record."""
    try:
        record = json.loads(first_line)
    except ValueError:
        raise InputError(f"{source}: the first line is not JSON") from None
    if not isinstance(record, dict):
        raise InputError(f"{source}: the first line is not a JSON object")
    if isinstance(record.get("stats"), dict) or isinstance(record.get("block"), dict):
        return "nested"
    if isinstance(record.get("request_id"), str) or "is_decode" in record:
        return "nested"
    if "selected_token_pos" in record and "seq_len_current" in record:
        return "seed"
    raise InputError(
        f"{source} is not a DSA trace: its first record has no selected_token_pos and "
        "seq_len_current fields"
    )


def _field(table: pa.Table, *path: str) -> pa.ChunkedArray:
    column = table[path[0]]
    for name in path[1:]:
        column = pc.struct_field(column, name)
    return column


def _tier_columns(table: pa.Table) -> dict[str, pa.ChunkedArray]:
    columns: dict[str, pa.ChunkedArray] = {}
    for tier in TIERS:
        columns[f"{tier}_hit_blocks"] = _field(table, "kv_fetch", tier, "hit_blocks")
        columns[f"{tier}_bytes_read"] = _field(table, "kv_fetch", tier, "bytes_read")
        columns[f"{tier}_read_ops"] = _field(table, "kv_fetch", tier, "read_ops")
        if tier != "hbm":  # the seed's hbm latency is the whole step's wall time
            columns[f"{tier}_latency_us"] = _field(table, "kv_fetch", tier, "latency_us")
    return columns


def canonical(table: pa.Table, fmt: Format) -> dict[str, pa.ChunkedArray | pa.Array]:
    """The canonical columns this layout has (the writer makes the others NULL)."""
    prefix = {
        "prefix_hit": _field(table, "prefix", "prefix_cache_hit"),
        "prefix_cached_blocks": _field(table, "prefix", "prefix_cached_blocks"),
        "prefix_key": _field(table, "prefix", "prefix_key"),
        "src_intersection_ratio": _field(table, "prefix", "intersection_ratio"),
    }
    common = {
        "event": table["event"],
        "run_name": table["run_name"],
        "dataset": table["dataset"],
        "layer_id": table["layer_id"],
        "topk": table["topk"],
        **prefix,
    }
    if fmt == "seed":
        return {
            **common,
            "request_id": table["request_id"],
            "rank": table["rank"],
            "world_size": table["world_size"],
            "step_idx": table["step_idx"],
            "seq_len": table["seq_len_current"],
            "positions": table["selected_token_pos"],
            "scores": table["scores_topk"],
            "score_min": _field(table, "scores_stats", "min"),
            "score_mean": _field(table, "scores_stats", "mean"),
            "score_max": _field(table, "scores_stats", "max"),
            "block_size": table["block_size_tokens"],
            "step_latency_us": _field(table, "kv_fetch", "hbm", "latency_us"),
            **_tier_columns(table),
            "src_count": table["unique_token_pos_count"],
            "src_offset_min": table["offset_min"],
            "src_offset_p50": table["offset_p50"],
            "src_offset_max": table["offset_max"],
            "src_unique_blocks": table["unique_blocks"],
            "src_total_blocks": table["total_blocks_in_use"],
            "src_touched_ratio": table["touched_block_ratio"],
            "src_tpb_mean": _field(table, "tokens_per_touched_block", "mean"),
            "src_tpb_p50": _field(table, "tokens_per_touched_block", "p50"),
            "src_tpb_p95": _field(table, "tokens_per_touched_block", "p95"),
        }
    position = pc.coalesce(table["seq_len_current"], table["query_pos"])
    return {
        **common,
        "request_key": table["request_id"],
        "is_decode": table["is_decode"],
        "ts_us": table["ts_us"],
        "step_idx": position,
        "seq_len": pc.add(position, 1),
        "positions": pc.coalesce(table["selected_token_pos"], table["topk_indices"]),
        "scores": table["topk_scores"],
        "score_min": _field(table, "stats", "score", "min"),
        "score_mean": _field(table, "stats", "score", "mean"),
        "score_max": _field(table, "stats", "score", "max"),
        "block_size": _field(table, "block", "block_size"),
        "src_count": _field(table, "stats", "unique_token_pos_count"),
        "src_offset_min": _field(table, "stats", "offset", "min"),
        "src_offset_p50": _field(table, "stats", "offset", "p50"),
        "src_offset_p95": _field(table, "stats", "offset", "p95"),
        "src_offset_max": _field(table, "stats", "offset", "max"),
        "src_unique_blocks": _field(table, "block", "unique_blocks"),
        "src_tpb_mean": _field(table, "block", "tokens_per_touched_block", "mean"),
        "src_tpb_p50": _field(table, "block", "tokens_per_touched_block", "p50"),
        "src_tpb_p95": _field(table, "block", "tokens_per_touched_block", "p95"),
    }
