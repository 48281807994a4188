"""The workload report: arrivals, lengths, prefix reuse, latencies, SLOs and fidelity."""

from __future__ import annotations

import altair as alt
import duckdb
import pyarrow as pa

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

TTFT_SLO_S, TPOT_SLO_S = 2.0, 0.1

_CANDIDATES = """
    SELECT t.run_id, r.run_name, NULL AS experiment
    FROM (SELECT run_id FROM workload_requests UNION SELECT run_id FROM request_timings
          UNION SELECT run_id FROM batch_metrics) AS t
    LEFT JOIN runs AS r USING (run_id)"""


def select(con: duckdb.DuckDBPyConnection, runs: list[str], experiments: list[str]) -> Scope:
    lines = select_runs(con, _CANDIDATES, runs=runs, experiments=experiments, what="workload runs")
    origins = dict(
        con.execute(
            "SELECT t.run_id, any_value(t.origin) FROM request_timings t "
            "JOIN report_runs USING (run_id) GROUP BY t.run_id ORDER BY t.run_id"
        ).fetchall()
    )
    measured = next((r for r, o in origins.items() if o == "measured"), None)
    simulated = next((r for r, o in origins.items() if o == "simulated"), None)
    if measured and simulated:
        lines.append(f"fidelity: {simulated} (simulated) against {measured} (measured)")
    lines.append(f"SLOs: TTFT {TTFT_SLO_S:g} s, TPOT {TPOT_SLO_S:g} s")
    return Scope(
        lines,
        {
            "ttft_slo_s": TTFT_SLO_S,
            "tpot_slo_s": TPOT_SLO_S,
            "measured": measured,
            "simulated": simulated,
        },
    )


def _arrivals(rows: pa.Table):
    line = (
        alt.Chart(data(rows), width=WIDTH)
        .mark_line()
        .encode(
            x=alt.X("minute:Q", title="minutes since the first arrival"),
            y=alt.Y("rate_per_s:Q", title="arrivals per second (1-minute windows)"),
            color=series_color(rows, "run"),
        )
    )
    return with_lone_points(line, ["run"])


def _prefix_curve(rows: pa.Table):
    return capacity_curve(
        rows,
        x_title="prefix cache capacity (blocks, log scale)",
        color=alt.Color("cache:N", title="cache"),
        by="run",
        by_title="run",
    )


def _latency_cdf(rows: pa.Table):
    line = (
        alt.Chart(data(rows), width=WIDTH)
        .mark_line(interpolate="step-after")
        .encode(
            x=alt.X("seconds:Q", scale=alt.Scale(type="log"), title="seconds (log scale)"),
            y=alt.Y(
                "cdf:Q",
                title="share of requests",
                scale=alt.Scale(domain=[0, 1]),
                axis=share_axis(),
            ),
            color=alt.Color("metric:N", title="metric"),
            strokeDash=alt.StrokeDash("run:N", title="run"),
        )
    )
    return with_lone_points(line, ["metric", "run"])


REPORT = ReportDefinition(
    name="workload",
    title="kvtrace workload report",
    summary="What the selected arrival traces ask of a server (arrivals, lengths, prefix "
    "reuse) and how benchmarks and simulators served them (latencies, SLOs, the "
    "fidelity of a simulation).",
    select=select,
    sections=(
        Section(
            "arrivals",
            "Arrival rate over time",
            chart=_arrivals,
            empty="No arrival trace selected.",
        ),
        Section(
            "arrival_summary",
            "The arrival process",
            "CV of inter-arrival times (1: Poisson); burstiness (sd - mean) / "
            "(sd + mean); the busiest minute against the mean rate.",
            empty="No arrival trace selected.",
        ),
        Section("lengths", "Request lengths", empty="No arrival trace selected."),
        Section(
            "prefix_curve",
            "Prefix-cache hit rate by capacity",
            "One cache shared by the trace's requests: a block cache (every block read on "
            "its own; OPT is its ceiling) against what engines reuse, the leading run of a "
            "request's cached blocks, in input tokens.",
            chart=_prefix_curve,
            empty="No selected trace records block hashes.",
        ),
        Section(
            "latency_cdf",
            "Latency CDFs",
            "Successful requests only.",
            chart=_latency_cdf,
            empty="No benchmark or simulator results selected.",
        ),
        Section(
            "slo", "SLO attainment and goodput", empty="No benchmark or simulator results selected."
        ),
        Section(
            "fidelity",
            "Simulated against measured",
            "(simulated - measured) / measured, percentile by percentile.",
            empty="Select a measured and a simulated run to compare them.",
        ),
    ),
)
