"""The tracer's ``summary.json`` for a stored DSA run: the ``dsa_summary`` view's statistics,
worked out from exact counts so that shares of a run read apart merge exactly."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import duckdb

from kvtrace.analysis._summary_shares import (
    ShareCounts,
    StoredTrace,
    ingest_histogram_statistics,
    merge,
    row_statistics,
    share_counts,
    trace_requests,
)
from kvtrace.analysis.shares import request_shares, run_here
from kvtrace.defaults import DEFAULT_BLOCK_SIZE
from kvtrace.errors import QueryError

# The run settings summary.json's config carries, as the collector recorded them.
_SETTINGS = {
    "topk": "topk",
    "sample_rate": "sample_rate",
    "temperature": "temperature",
    "seed": "seed",
    "prefix_tokens": "prefix_key_tokens",
    "max_new_tokens": "max_new_tokens",
    "max_prompt_tokens": "max_prompt_tokens",
    "batch_size": "batch_size",
    "layers": "layers",
    "scores": "scores",
    "phase": "phase",
    "block_sizes": "block_sizes",
}


# What each statistic's observations are: its count counts these, its mean is over them.
COUNTED_OVER = {
    "unique_blocks": "rows (one per step and layer)",
    "touched_block_ratio": "rows",
    "tokens_per_touched_block": (
        "touched blocks of every row, pooled (mean = selected positions / touched blocks "
        "of the whole run); mean_per_row is the mean of each row's selected / unique_blocks"
    ),
    "offsets": "selected positions of every row, pooled",
    "prefix_intersection_ratio": "rows with a prefix region",
}


@dataclass(frozen=True)
class SummarySpec:
    """Which summary: a run (id or name) at a stored block size (None: its only one)."""

    run: str
    block_size: int | None = None


@dataclass(frozen=True)
class SummaryShare:
    """The requests of a stored trace with ids in a closed range (None: all of them), and
    the run's row (name and settings) the summary reports."""

    trace: StoredTrace
    requests: tuple[int, int] | None
    run: dict[str, Any]


@dataclass(frozen=True)
class SummaryAnalysis:
    """``summary.json`` in shares (`kvtrace.analysis.shares`): a share counts some of the
    run's requests, and the statistics are worked out once from the added counts."""

    spec: SummarySpec

    def plan(self, con: duckdb.DuckDBPyConnection, tasks: int) -> list[SummaryShare]:
        row = _stored_trace(con, self.spec.run, self.spec.block_size)
        trace = StoredTrace(row["run_id"], row["dataset"], row["block_size"])
        shares = request_shares(trace_requests(con, trace), tasks) if tasks > 1 else [None]
        return [SummaryShare(trace, share, row) for share in shares]

    def run(self, con: duckdb.DuckDBPyConnection, share: SummaryShare) -> ShareCounts:
        return share_counts(con, share.trace, share.requests)

    def merge(
        self, con: duckdb.DuckDBPyConnection, shares: list[SummaryShare], parts: list[ShareCounts]
    ) -> dict[str, Any]:
        return _summary(con, shares[0].run, shares[0].trace, row_statistics(merge(parts)))


def run_summary(
    con: duckdb.DuckDBPyConnection, run: str, block_size: int | None = None
) -> dict[str, Any]:
    """The summary of ``run`` (a run id or run name) at a stored block size, on ``con``.

    Without ``block_size``: the run's one stored block size, or where it holds several,
    the one it was traced at (its run_meta's ``kv_block_size_tokens``, else 64).
    """
    return run_here(SummaryAnalysis(SummarySpec(run, block_size)), con)


def _summary(
    con: duckdb.DuckDBPyConnection, row: dict[str, Any], trace: StoredTrace, per_row: dict[str, Any]
) -> dict[str, Any]:
    collector = json.loads(row["collector_config"] or "{}")
    summary: dict[str, Any] = {
        "run_name": row["run_name"],
        "run_id": trace.run_id,
        "dataset": trace.dataset,
        "config": _config(collector, trace.block_size, row["dataset_variant"]),
        "rows": per_row["rows"],
        "requests": per_row["requests"],
        "unique_blocks": per_row["unique_blocks"],
        "touched_block_ratio": per_row["touched_block_ratio"],
        "tokens_per_touched_block": {
            **ingest_histogram_statistics(con, "_dsa_fill_hist_values", trace),
            "mean_per_row": per_row["tokens_per_block_mean_per_row"],
        },
        "offsets": ingest_histogram_statistics(con, "_dsa_offset_hist_values", trace),
        "prefix_intersection_ratio": per_row["prefix_intersection_ratio"],
        "prefix_hot_blocks": per_row["prefix_hot_blocks"],
        "counted_over": COUNTED_OVER,
    }
    if collector.get("arrival_trace") or "serving" in collector.get("config", {}):
        summary["serving"] = _serving(con, trace.run_id, collector)
    return summary


def _stored_trace(
    con: duckdb.DuckDBPyConnection, run: str, block_size: int | None
) -> dict[str, Any]:
    """The one stored trace ``run`` names at ``block_size``, with the run's settings."""
    rows = con.execute(
        "SELECT r.run_name, r.collector_config, r.dataset_variant, t.* "
        "FROM (SELECT DISTINCT run_id, dataset, block_size FROM dsa_steps) AS t "
        "JOIN (SELECT DISTINCT ON (run_id) * FROM runs) AS r USING (run_id) "
        "WHERE t.run_id IN (SELECT run_id FROM runs_named([$run])) "
        "ORDER BY t.block_size, t.dataset",
        {"run": run},
    ).fetchall()
    names = [d[0] for d in con.description]
    found = [dict(zip(names, row, strict=True)) for row in rows]
    if not found:
        raise QueryError(
            f"no DSA run {run!r} in the warehouse; "
            "'kvtrace sql \"SELECT run_id, run_name FROM runs\"' lists them"
        )
    sizes = sorted({row["block_size"] for row in found})
    if block_size is None and len(sizes) > 1:
        block_size = _own_block_size(found[0]["collector_config"])
        if block_size not in sizes:
            raise QueryError(
                f"run {run!r} is stored at block sizes {sizes} and was traced at "
                f"{block_size}; choose one with --block-size"
            )
    chosen = [row for row in found if block_size in (None, row["block_size"])]
    if not chosen:
        raise QueryError(
            f"run {run!r} is stored at block sizes {sizes}, not {block_size}; "
            "dsa_blocks(B) re-bins it at any size"
        )
    if len(ids := sorted({row["run_id"] for row in chosen})) > 1:
        raise QueryError(
            f"{len(ids)} runs are named {run!r} ({', '.join(ids)}); give one of their ids"
        )
    if len(chosen) > 1:
        raise QueryError(
            f"run {run!r} holds several datasets "
            f"({', '.join(r['dataset'] for r in chosen)}); query dsa_summary"
        )
    return chosen[0]


def _own_block_size(collector_config: str | None) -> int:
    """The block size a run's summary.json is at when the run holds several: the tracer's
    own (its run_meta's kv_block_size_tokens), else the tracer's default."""
    try:
        config = json.loads(collector_config or "{}")
    except ValueError:
        config = {}
    tracer = config.get("config") if isinstance(config, dict) else None
    own = tracer.get("kv_block_size_tokens") if isinstance(tracer, dict) else None
    return own if isinstance(own, int) and own > 0 else DEFAULT_BLOCK_SIZE


def _config(
    collector: dict[str, Any], block_size: int, dataset_variant: str | None
) -> dict[str, Any]:
    """The run's settings: an ingested tracer's own config, then what kvtrace recorded."""
    config = dict(collector.get("config", {}))
    config.update({name: collector[key] for key, name in _SETTINGS.items() if key in collector})
    config["kv_block_size_tokens"] = block_size
    config["dataset_variant"] = dataset_variant
    return config


def _serving(
    con: duckdb.DuckDBPyConnection, run_id: str, collector: dict[str, Any]
) -> dict[str, Any]:
    """Seed section 5.3's serving block of an arrival-trace run (BurstGPT replays)."""
    latency = con.execute(
        "SELECT * FROM dsa_request_latency WHERE run_id = $run", {"run": run_id}
    ).fetchone()
    values = latency[2:] if latency is not None else (None,) * 4
    return {
        "requests": latency[1] if latency is not None else 0,
        "latency_ms": dict(zip(("p50", "p95", "p99", "max"), values, strict=True)),
        "batch_size": collector.get("batch_size"),
        "max_new_tokens_cap": collector.get("max_new_tokens_cap"),
    }
