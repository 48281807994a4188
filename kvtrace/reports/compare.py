"""The compare report: two experiments or two run selections side by side (DSA
statistics, or profiler traces' operators and kernels)."""

from __future__ import annotations

import altair as alt
import duckdb
import pyarrow as pa

from kvtrace.reports._arguments import two_sides
from kvtrace.reports._charts import WIDTH, blank_when_zero, data
from kvtrace.reports._format import SHARE_AXIS
from kvtrace.reports._model import ReportDefinition, Scope, Section
from kvtrace.reports._selection import select_runs

SINGLE_RUN = (
    "A side rests on a single run: its differences are within single-run "
    "variance and are no evidence either way."
)


def select(con: duckdb.DuckDBPyConnection, runs: list[str], experiments: list[str]) -> Scope:
    two_sides(runs, experiments)
    if len(experiments) == 2:
        mode, left, right = "experiments", *experiments
        candidates = (
            "SELECT run_id, NULL AS run_name, experiment FROM request_metrics "
            "UNION SELECT run_id, NULL, experiment FROM pool_snapshots"
        )
        lines = [
            *select_runs(
                con, candidates, runs=[], experiments=[left], what="runs", table="report_left"
            ),
            *select_runs(
                con, candidates, runs=[], experiments=[right], what="runs", table="report_right"
            ),
        ]
    else:
        mode, left, right = "runs", *runs
        candidates = (
            "SELECT run_id, run_name, NULL AS experiment FROM runs "
            "WHERE kind IN ('dsa', 'timeline')"
        )
        what = "DSA or profiler runs"
        lines = [
            *select_runs(
                con, candidates, runs=[left], experiments=[], what=what, table="report_left"
            ),
            *select_runs(
                con, candidates, runs=[right], experiments=[], what=what, table="report_right"
            ),
        ]
    con.execute("""
        CREATE OR REPLACE TEMP TABLE report_sides AS
        SELECT run_id, 'left' AS side FROM report_left
        UNION ALL SELECT run_id, 'right' FROM report_right""")
    return Scope(
        [f"left: {lines[0]}", f"right: {lines[1]}"],
        {"mode": mode, "left_side": left, "right_side": right},
        warning=_same_sides_warning(con),
    )


def _same_sides_warning(con: duckdb.DuckDBPyConnection) -> str:
    """A warning when both sides hold the same runs: every difference is then 0."""
    left, right = (
        {row[0] for row in con.execute(f"SELECT run_id FROM {table}").fetchall()}
        for table in ("report_left", "report_right")
    )
    if left != right:
        return ""
    return (
        "Both sides select the same runs, so every difference below is 0 by construction: "
        "give two different experiments or runs."
    )


def _single_run_warning(rows: pa.Table) -> str:
    return SINGLE_RUN if any(rows["single_run"].to_pylist()) else ""


_no_difference = blank_when_zero(
    "delta_rel", "The two sides do not differ: every relative difference is 0."
)


def _trace_diff(rows: pa.Table):
    """The operators and kernels whose time changed most, right - left."""
    return (
        alt.Chart(data(rows), width=WIDTH)
        .mark_bar()
        .encode(
            x=alt.X("total_us_diff:Q", title="time right - left (µs)"),
            y=alt.Y("name:N", title="", sort="-x", axis=alt.Axis(labelLimit=320)),
            color=alt.Color("status:N", title=""),
            tooltip=["kind:N", "name:N", "count_a:Q", "count_b:Q", "total_us_diff:Q"],
        )
    )


def _deltas(rows: pa.Table):
    return (
        alt.Chart(data(rows), width=WIDTH)
        .mark_bar()
        .encode(
            y=alt.Y("metric:N", title=None),
            x=alt.X(
                "delta_rel:Q",
                title="relative difference (right - left) / left",
                axis=alt.Axis(format=SHARE_AXIS),
            ),
            color=alt.Color(
                "single_run:N",
                title="single run on a side",
                scale=alt.Scale(domain=[False, True], range=["#1f77b4", "#e8590c"]),
            ),
            tooltip=["metric:N", "left_mean:Q", "right_mean:Q", "left_runs:Q", "right_runs:Q"],
        )
    )


REPORT = ReportDefinition(
    name="compare",
    title="kvtrace comparison report",
    summary="Two experiments (serving and pool metrics) or two run selections (DSA "
    "statistics) side by side, with how many runs stand behind each side.",
    select=select,
    sections=(
        Section(
            "experiments",
            "Serving and pool metrics, side by side",
            warning=_single_run_warning,
            empty="Not an experiment comparison (sides given with --run).",
        ),
        Section(
            "experiments",
            "Relative differences (serving and pool)",
            chart=_deltas,
            warning=_single_run_warning,
            empty="Not an experiment comparison (sides given with --run).",
            blank=_no_difference,
        ),
        Section(
            "modes",
            "Execution modes and truncation, side by side",
            warning=_single_run_warning,
            empty="Not an experiment comparison (sides given with --run).",
        ),
        Section(
            "dsa",
            "DSA statistics, side by side",
            warning=_single_run_warning,
            empty="Not a DSA run comparison (sides given with --experiment).",
        ),
        Section(
            "dsa",
            "Relative differences (DSA)",
            chart=_deltas,
            warning=_single_run_warning,
            empty="Not a DSA run comparison (sides given with --experiment).",
            blank=_no_difference,
        ),
        Section(
            "trace_diff",
            "Profiler traces: operators and kernels added, removed or changed",
            "HTA's trace diff (timeline_diff): the 25 CPU operators and GPU kernels whose "
            "summed time changed most from the left run to the right.",
            chart=_trace_diff,
            empty="Not a comparison of two profiler traces (runs given with --run).",
        ),
    ),
)
