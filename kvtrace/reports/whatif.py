"""The whatif report: what a tiered KV cache would serve of the selected DSA runs."""

from __future__ import annotations

import altair as alt
import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from kvtrace.analysis.kv_access import DEFAULT_TIERS, Sharing
from kvtrace.analysis.kv_access import Scope as CacheScope
from kvtrace.analysis.kv_access.whatif import WhatIfSpec, shareable_runs, whatif
from kvtrace.reports._charts import (
    WIDTH,
    capacity_curve,
    data,
    series_color,
    share_axis,
    with_lone_points,
)
from kvtrace.reports._model import ReportDefinition, Scope, Section
from kvtrace.reports._selection import select_runs
from kvtrace.sql.catalog import cursor_of

FINE, COARSE = 16, 64


# The pools compared side by side: (label, scope, sharing).  One cache per request is the
# classic private simulation; one pool with private blocks isolates what sharing adds.
POOLS: tuple[tuple[str, CacheScope, Sharing], ...] = (
    ("per-request caches", "request", "private"),
    ("one pool, private blocks", "run", "private"),
    ("one pool, shared by content", "run", "content"),
)


def select(con: duckdb.DuckDBPyConnection, runs: list[str], experiments: list[str]) -> Scope:
    lines = select_runs(
        con,
        "SELECT DISTINCT s.run_id, r.run_name, NULL AS experiment "
        "FROM dsa_steps s LEFT JOIN runs r USING (run_id)",
        runs=runs,
        experiments=experiments,
        what="DSA runs",
    )
    chosen = [row[0] for row in con.execute("SELECT run_id FROM report_runs").fetchall()]
    keyed = shareable_runs(cursor_of(con))
    shareable = [run for run in chosen if run in keyed]
    tiers, run_rows = [], []
    for order, (label, scope, sharing) in enumerate(POOLS):
        pool_runs = shareable if sharing == "content" else chosen
        if not pool_runs:
            continue
        spec = WhatIfSpec(
            block_sizes=(FINE, COARSE),
            runs=tuple(pool_runs),
            scope=scope,
            sharing=sharing,
        )
        result = whatif(cursor_of(con), spec)
        tiers.append(_labelled(result.tiers, label, order, spec))
        run_rows.append(_labelled(result.runs, label, order, spec))
    _store(con, "report_whatif", pa.concat_tables(tiers))
    _store(con, "report_whatif_runs", pa.concat_tables(run_rows))
    lines.append(f"block sizes {FINE} and {COARSE} tokens; tiers " + " ".join(DEFAULT_TIERS))
    unshared = [run for run in chosen if run not in shareable]
    if unshared:
        lines.append(
            "no shared pool for " + ", ".join(unshared) + " (neither token ids nor prefix keys)"
        )
    return Scope(lines, {"fine": FINE, "coarse": COARSE})


def _labelled(table: pa.Table, pool: str, order: int, spec: WhatIfSpec) -> pa.Table:
    """``table`` with the pool's label and order, and each tier's place in the hierarchy."""
    table = table.append_column("pool", pa.array([pool] * len(table), pa.string()))
    table = table.append_column("pool_order", pa.array([order] * len(table), pa.int64()))
    if "tier" in table.column_names:
        place = {t.name: i for i, t in enumerate(spec.tiers)}
        table = table.append_column(
            "tier_order", pa.array([place[name] for name in table["tier"].to_pylist()])
        )
    return table


def _store(con: duckdb.DuckDBPyConnection, name: str, table: pa.Table) -> None:
    con.register("_report_arrow", table)
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS FROM _report_arrow")
    con.unregister("_report_arrow")


def _hit_curves(rows: pa.Table):
    runs = set(rows["run_id"].to_pylist())
    chart = capacity_curve(
        rows,
        x_title="cache capacity (blocks, log scale)",
        color=alt.Color("policy:N", title="policy"),
        by="block_size",
        by_title="block size",
    )
    return chart.facet(row=alt.Row("run_id:N", title="run")) if len(runs) > 1 else chart


def _reuse_cdf(rows: pa.Table):
    shifted = rows.set_column(
        rows.schema.get_field_index("distance"), "distance_plus_one", pc.add(rows["distance"], 1)
    )
    line = (
        alt.Chart(data(shifted), width=WIDTH)
        .mark_line(interpolate="step-after")
        .encode(
            x=alt.X(
                "distance_plus_one:Q",
                scale=alt.Scale(type="log"),
                title="stack distance + 1 (LRU capacity that hits, log scale)",
            ),
            y=alt.Y(
                "cdf:Q",
                title="share of re-accesses",
                scale=alt.Scale(domain=[0, 1]),
                axis=share_axis(),
            ),
            color=alt.Color("series:N", title="run, block size"),
        )
    )
    return with_lone_points(line, ["series"])


def _working_set(rows: pa.Table):
    line = (
        alt.Chart(data(rows), width=WIDTH)
        .mark_line()
        .encode(
            x=alt.X("decode_step:Q", title="decode step of the request"),
            y=alt.Y("working_set:Q", title="blocks touched in the last 16 steps (mean)"),
            color=series_color(rows),
        )
    )
    return with_lone_points(line, ["series"])


def _step_overlap(rows: pa.Table):
    return (
        alt.Chart(data(rows), width=WIDTH)
        .mark_line(point=True)
        .encode(
            x=alt.X("layer_id:O", title="layer"),
            y=alt.Y(
                "reused_share:Q",
                title="share of blocks selected at the previous step",
                scale=alt.Scale(domain=[0, 1]),
                axis=share_axis(),
            ),
            color=series_color(rows),
        )
    )


REPORT = ReportDefinition(
    name="whatif",
    title="kvtrace KV tier what-if report",
    summary="What a KV cache in HBM, host memory and a remote pool would serve of each "
    "decode step's sparse-attention top-k, by policy, capacity and block size, and what "
    "a pool shared by content adds over private caches.",
    select=select,
    sections=(
        Section(
            "hit_curves",
            "Hit rate against cache capacity",
            "One cache per request; OPT (Belady) is the ceiling of every online policy. "
            f"{COARSE}-token blocks are the squares on dashed lines.",
            chart=_hit_curves,
        ),
        Section(
            "reuse_cdf",
            "Reuse-distance CDF",
            "LRU stack distance of every re-access (first touches left out).",
            chart=_reuse_cdf,
        ),
        Section(
            "working_set",
            "Working set over decode steps",
            f"Distinct {FINE}-token blocks touched in the last 16 steps.",
            chart=_working_set,
        ),
        Section(
            "step_overlap",
            "Step-to-step overlap per layer",
            f"Share of a layer's {FINE}-token blocks it also selected one step before.",
            chart=_step_overlap,
        ),
        Section(
            "pools",
            "Private and shared pools side by side",
            "kvtrace whatif with the default tiers and LRU, for per-request caches, one pool "
            "of private blocks, and one pool whose blocks are shared by content: the HBM hit "
            "rate, the hits on blocks another request brought in, and the time to first "
            "token that prompt blocks found in the pool save against recomputing them.",
        ),
        Section(
            "tiers",
            "Bytes and fetch time per decode step, per tier",
            "The same three pools, tier by tier.",
        ),
    ),
)
