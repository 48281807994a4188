"""The dsa report: which KV blocks DSA selections touch, how far back, how they share."""

from __future__ import annotations

import altair as alt
import duckdb
import pyarrow as pa

from kvtrace.errors import InputError
from kvtrace.reports._charts import (
    WIDTH,
    count_axis,
    data,
    series_color,
    share_axis,
    with_lone_points,
)
from kvtrace.reports._model import ReportDefinition, Scope, Section
from kvtrace.reports._selection import select_runs

DEFAULT_BLOCK_SIZE = 64  # tokens per block: kvtrace collect dsa's default, the demo's summary


def select(con: duckdb.DuckDBPyConnection, runs: list[str], experiments: list[str]) -> Scope:
    lines = select_runs(
        con,
        "SELECT run_id, run_name, NULL AS experiment FROM runs WHERE kind = 'dsa'",
        runs=runs,
        experiments=experiments,
        what="DSA runs",
    )
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE report_base AS
        SELECT run_id,
               CASE WHEN list_contains(list(DISTINCT block_size), $default) THEN $default
                    ELSE max(block_size) END AS block_size
        FROM dsa_steps
        WHERE run_id IN (SELECT run_id FROM report_runs) GROUP BY run_id""",
        {"default": DEFAULT_BLOCK_SIZE},
    )
    sizes = sorted(row[0] for row in con.execute("SELECT block_size FROM report_base").fetchall())
    if not sizes:
        raise InputError("the selected DSA runs hold no dsa_steps rows")
    shown = ", ".join(str(size) for size in dict.fromkeys(sizes))
    lines.append(
        f"read at {shown}-token blocks (the collector's default, {DEFAULT_BLOCK_SIZE}; "
        "a run traced without it at its largest)"
    )
    common = DEFAULT_BLOCK_SIZE if DEFAULT_BLOCK_SIZE in sizes else sizes[-1]
    return Scope(lines, {"block_size": common})


def _unique_blocks(rows: pa.Table):
    return (
        alt.Chart(data(rows), width=WIDTH)
        .mark_line(interpolate="step-after", point=True)
        .encode(
            x=alt.X("unique_blocks:Q", title="unique blocks per (request, step, layer) row"),
            y=alt.Y("rows:Q", title="rows", axis=count_axis()),
            color=series_color(rows),
        )
    )


def _offset_cdf(rows: pa.Table):
    line = (
        alt.Chart(data(rows), width=WIDTH)
        .mark_line()
        .encode(
            x=alt.X(
                "offset_plus_one:Q",
                scale=alt.Scale(type="log"),
                title="offset + 1 (tokens back from the current token, log scale)",
            ),
            y=alt.Y(
                "cdf:Q",
                title="share of selected positions",
                scale=alt.Scale(domain=[0, 1]),
                axis=share_axis(),
            ),
            color=series_color(rows),
        )
    )
    return with_lone_points(line, ["series"])


def _touched_ratio(rows: pa.Table):
    base = alt.Chart(data(rows), width=WIDTH)
    band = base.mark_area(opacity=0.25).encode(
        x=alt.X("seq_len_bin:Q", title="sequence length (tokens)"),
        y=alt.Y("ratio_p10:Q", title="touched-block ratio (mean, band p10-p90)"),
        y2="ratio_p90:Q",
        color=series_color(rows),
    )
    line = base.mark_line().encode(x="seq_len_bin:Q", y="ratio_mean:Q", color=series_color(rows))
    return band + with_lone_points(line, ["series"])


def _layer_step(rows: pa.Table):
    chart = (
        alt.Chart(data(rows), width=WIDTH)
        .mark_rect()
        .encode(
            x=alt.X(
                "decode_step:O", title="decode step (bin start)", axis=alt.Axis(labelOverlap=True)
            ),
            y=alt.Y("layer_id:O", title="layer"),
            color=alt.Color("unique_blocks_mean:Q", title="mean unique blocks"),
        )
    )
    if len(set(rows["run_id"].to_pylist())) > 1:
        return chart.facet(row=alt.Row("run_id:N", title="run"))
    return chart


def _tokens_per_block(rows: pa.Table):
    return (
        alt.Chart(data(rows), width=WIDTH)
        .mark_bar()
        .encode(
            x=alt.X("tokens:O", title="selected positions in the block"),
            y=alt.Y("blocks:Q", title="touched blocks", axis=count_axis()),
            color=series_color(rows),
            xOffset="series:N",
        )
    )


def _prefix_intersection(rows: pa.Table):
    return (
        alt.Chart(data(rows), width=WIDTH)
        .mark_bar(opacity=0.6)
        .encode(
            x=alt.X("ratio_bin:Q", title="intersection ratio", scale=alt.Scale(zero=False)),
            x2="ratio_bin_end:Q",
            y=alt.Y("rows:Q", title="rows", axis=count_axis()),
            y2=alt.datum(0),
            color=series_color(rows),
            tooltip=["series:N", "ratio_bin:Q", "ratio_bin_end:Q", "rows:Q"],
        )
    )


def _sweep(rows: pa.Table):
    return (
        alt.Chart(data(rows), width=WIDTH // 2 - 20)
        .mark_line(point=True)
        .encode(
            x=alt.X(
                "block_size:Q",
                scale=alt.Scale(type="log", base=2),
                axis=alt.Axis(values=[4, 16, 64, 128]),
                title="block size (tokens)",
            ),
            y=alt.Y("mean:Q", title="mean per row"),
            color=alt.Color("run_id:N", title="run"),
        )
        .facet(column=alt.Column("measure:N", title=None))
        .resolve_scale(y="independent")
    )


REPORT = ReportDefinition(
    name="dsa",
    title="kvtrace DSA report",
    summary="Which KV blocks the DeepSeek sparse-attention top-k touches per decode step, "
    "how far back it reaches, and how much of it a cached prefix serves.",
    select=select,
    sections=(
        Section(
            "summary",
            "Summary (summary.json statistics)",
            "Per run, dataset and stored block size; linear percentiles.",
        ),
        Section(
            "unique_blocks",
            "Unique blocks per step",
            "Distinct KV blocks one (request, decode step, layer) selection touches.",
            chart=_unique_blocks,
        ),
        Section(
            "offset_cdf",
            "Offset CDF",
            "How far back selections reach; log axis.",
            chart=_offset_cdf,
        ),
        Section(
            "recency",
            "Recency shares",
            "Share of all selected positions among the most recent tokens.",
        ),
        Section(
            "touched_ratio",
            "Touched-block ratio against sequence length",
            "unique_blocks / blocks in use; mean line with the p10-p90 band.",
            chart=_touched_ratio,
        ),
        Section("layer_step", "Unique blocks by layer and decode step", chart=_layer_step),
        Section("tokens_per_block", "Tokens per touched block", chart=_tokens_per_block),
        Section(
            "prefix_intersection",
            "Prefix intersection",
            "Share of a row's selected blocks inside its request's prefix region (the "
            "cached length on a hit, its own first 256 tokens on a miss).",
            chart=_prefix_intersection,
            empty="No request of the selected runs has a prefix region.",
        ),
        Section(
            "prefix_hot_blocks",
            "Hottest prefix blocks",
            empty="No request of the selected runs has a prefix region.",
        ),
        Section(
            "block_size_sweep",
            "Block-size sweep",
            "One trace re-binned at 4, 16, 64 and 128 tokens per block.",
            chart=_sweep,
        ),
        Section(
            "selection_shape",
            "Selection shape per layer",
            "At the report's block size: how far each selection spreads over the blocks "
            "(span in blocks, density = unique / span), how evenly its tokens fill them "
            "(normalised entropy, Gini), how recent they are (shares within the last 4, 16 "
            "and 64 blocks, mean distance in blocks), the median decode steps before a "
            "layer selects a block again, the share of blocks selected at one step only, "
            "and the run's LRU knee (blocks a per-request cache needs for 90 % of its "
            "ceiling hits).",
            max_rows=512,
        ),
        Section("kv_fetch", "KV reads per tier", empty="The trace recorded no tier columns."),
        Section("per_request", "Per request"),
        Section("per_dataset", "Per dataset"),
    ),
)
