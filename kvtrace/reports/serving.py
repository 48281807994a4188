"""The serving report: where errors cluster and how latency splits by execution mode."""

from __future__ import annotations

import altair as alt
import pyarrow as pa

from kvtrace.reports.charts import WIDTH, data, series_color
from kvtrace.reports.model import ReportDefinition, Section
from kvtrace.reports.selection import runs_in


def _deciles(rows: pa.Table):
    return (
        alt.Chart(data(rows), width=WIDTH // 2 - 30)
        .mark_bar()
        .encode(
            x=alt.X("decile:O", title="decile of the run"),
            y=alt.Y("error_rate:Q", title="error rate", axis=alt.Axis(format="%")),
            color=series_color(rows, "run_id"),
            xOffset="run_id:N",
            tooltip=["run_id:N", "decile:O", "requests:Q", "error_rate:Q"],
        )
        .facet(column=alt.Column("binning:N", title=None, sort=["equal time", "equal count"]))
    )


def _workers(rows: pa.Table):
    return (
        alt.Chart(data(rows), width=WIDTH)
        .mark_bar()
        .encode(
            x=alt.X("decode_worker:N", title="decode worker"),
            y=alt.Y("error_rate:Q", title="error rate", axis=alt.Axis(format="%")),
            color=series_color(rows, "run_id"),
            xOffset="run_id:N",
            tooltip=["run_id:N", "decode_worker:N", "requests:Q", "errors:Q"],
        )
    )


def _modes(rows: pa.Table):
    return (
        alt.Chart(data(rows), width=WIDTH)
        .mark_bar()
        .encode(
            y=alt.Y("run_id:N", title=None),
            x=alt.X("share:Q", stack="normalize", title="share of requests"),
            color=alt.Color("execution_mode:N", title="execution mode"),
            tooltip=["run_id:N", "execution_mode:N", "requests:Q", "errors:Q"],
        )
    )


def _latency(rows: pa.Table):
    return (
        alt.Chart(data(rows), width=WIDTH)
        .mark_line(interpolate="step-after")
        .encode(
            x=alt.X("latency_s:Q", title="latency (s)"),
            y=alt.Y("share:Q", title="share of successful requests"),
            color=alt.Color("mode:N", title="run and mode"),
        )
    )


REPORT = ReportDefinition(
    name="serving",
    title="kvtrace serving report",
    summary="Error rates over the run (equal-time and equal-count bins), per worker and "
    "per session; the execution-mode mix; latency per mode.",
    select=runs_in("request_metrics", "serving runs"),
    sections=(
        Section(
            "deciles",
            "Error rate per decile",
            "Equal-time and equal-count bins side by side.",
            chart=_deciles,
        ),
        Section("workers", "Errors per decode worker", chart=_workers),
        Section("sessions", "Sessions with the most errors", empty="No session saw an error."),
        Section("modes", "Execution-mode mix", chart=_modes),
        Section("latency_cdf", "Latency CDF per execution mode", chart=_latency),
        Section("request_latency_by_mode", "Latency percentiles per execution mode"),
        Section("error_types", "Error types", empty="No failed requests."),
        Section("turn_profile", "Turn profile of failing sessions"),
        Section(
            "recurrence",
            "Sessions failing again across reruns",
            empty="No session failed in more than one run of an experiment.",
        ),
        Section(
            "pool_state", "Failures beside their worker's pool state", empty="No failed requests."
        ),
    ),
)
