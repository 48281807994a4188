"""The pool report: what fills each worker's KV pool over time."""

from __future__ import annotations

import altair as alt
import pyarrow as pa

from kvtrace.reports._charts import WIDTH, blank_when_zero, count_axis, data
from kvtrace.reports._model import ReportDefinition, Scope, Section
from kvtrace.reports._selection import runs_in

WARMUP_FRACTION = 0.1
_runs = runs_in("pool_snapshots", "pool runs")


def select(con, runs: list[str], experiments: list[str]) -> Scope:
    """The pool runs asked for; every statistic drops the first tenth of each run."""
    scope = _runs(con, runs, experiments)
    return Scope(
        [
            *scope.lines,
            f"warm-up: the first {WARMUP_FRACTION:.0%} of each run's "
            "time span is left out of every statistic",
        ],
        {"warmup_fraction": WARMUP_FRACTION},
    )


def _series(rows: pa.Table):
    base = alt.Chart(width=WIDTH, height=160)
    area = base.mark_area().encode(
        x=alt.X("t_s:Q", title="seconds since start"),
        y=alt.Y("tokens:Q", stack=True, title="tokens"),
        color=alt.Color(
            "component:N",
            sort=["held", "other", "available"],
            scale=alt.Scale(
                domain=["held", "other", "available"], range=["#1f77b4", "#e8590c", "#b2df8a"]
            ),
        ),
        order=alt.Order("component:N", sort="descending"),
    )
    capacity = base.mark_line(color="black", strokeDash=[4, 3]).encode(
        x="t_s:Q", y=alt.Y("capacity:Q", title="tokens")
    )
    return alt.layer(area, capacity, data=data(rows)).facet(row=alt.Row("worker:N", title=None))


def _other(rows: pa.Table):
    return (
        alt.Chart(data(rows), width=WIDTH)
        .mark_bar(opacity=0.6)
        .encode(
            x=alt.X("other_bin:Q", title="other tokens"),
            x2="other_bin_end:Q",
            y=alt.Y("ticks:Q", title="ticks", axis=count_axis()),
            y2=alt.datum(0),
            color=alt.Color("worker_role:N", title="role"),
        )
    )


def _stuck(rows: pa.Table):
    return (
        alt.Chart(data(rows), width=WIDTH)
        .mark_bar(height=12, color="#e8590c")
        .encode(
            x=alt.X("start_s:Q", title="seconds since start"),
            x2="end_s:Q",
            y=alt.Y("worker:N", title=None),
            tooltip=["worker:N", "start_s:Q", "end_s:Q", "ticks:Q", "other_mean:Q"],
        )
    )


REPORT = ReportDefinition(
    name="pool",
    title="kvtrace KV pool report",
    summary="Per worker: held, other (capacity - held - available) and available tokens "
    "over time, how other is distributed, and where memory sits stuck.",
    select=select,
    sections=(
        Section(
            "pool_series",
            "Held / other / available over time",
            "Stacked per worker; the dashed line is the capacity.",
            chart=_series,
        ),
        Section(
            "other_distribution",
            "Distribution of other",
            "Ticks per bin of other tokens; a bimodal shape shows as two humps.",
            chart=_other,
        ),
        Section(
            "decode_summary",
            "Decode workers after warm-up",
            "Ticks, other percentiles by ticks and by time, threshold shares.",
        ),
        Section(
            "thresholds",
            "Threshold frequencies",
            "Shares of ticks and of time; ticks are irregular when polls back off.",
        ),
        Section(
            "stuck",
            "Stuck stretches on the time axis",
            chart=_stuck,
            empty="No stuck stretches (decode workers: held 0, no sessions, other "
            "above 30K, 2+ ticks).",
        ),
        Section("stuck", "Stuck stretches", empty="No stuck stretches."),
        Section(
            "breakdown",
            "What other holds",
            empty="The servers did not report the breakdown fields.",
        ),
        Section(
            "throughput",
            "Decode throughput by pool state",
            empty="The servers did not report last_gen_throughput.",
            blank=blank_when_zero(
                "with_throughput",
                "No tick reported last_gen_throughput, so there is no throughput to compare "
                "between pool states.",
            ),
        ),
    ),
)
