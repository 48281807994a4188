"""The serving report: latency against throughput across load levels, the
serving-benchmark table, where errors cluster and how latency splits by execution mode."""

from __future__ import annotations

import altair as alt
import pyarrow as pa

from kvtrace.reports._charts import WIDTH, data, series_color, share_axis, with_lone_points
from kvtrace.reports._format import NUMBER_AXIS
from kvtrace.reports._model import ReportDefinition, Scope, Section
from kvtrace.reports._selection import select_runs

# Runs with serving requests, benchmark results or simulated batches; the experiment of a
# benchmark run is the --experiment it was ingested with.
CANDIDATES = """
SELECT t.run_id, r.run_name,
       coalesce(t.experiment, json_extract_string(r.collector_config, '$.experiment'))
           AS experiment
FROM (SELECT run_id, experiment FROM request_metrics
      UNION SELECT run_id, NULL FROM request_timings
      UNION SELECT run_id, NULL FROM benchmark_summaries
      UNION SELECT run_id, NULL FROM batch_metrics) AS t
LEFT JOIN runs AS r USING (run_id)
"""


def select(con, runs: list[str], experiments: list[str]) -> Scope:
    return Scope(
        select_runs(con, CANDIDATES, runs=runs, experiments=experiments, what="serving runs")
    )


def _latency_throughput(rows: pa.Table):
    return _latency_against(
        rows,
        "request_throughput",
        "requests per second",
        WIDTH // 3 - 20,
        ["TTFT", "TPOT", "E2E latency"],
    )


def _latency_load(rows: pa.Table):
    return _latency_against(
        rows, "request_rate", "requests per second asked for", WIDTH // 2 - 30, ["TTFT", "TPOT"]
    )


def _latency_against(rows: pa.Table, x: str, x_title: str, width: int, metrics: list[str]):
    """Latency percentiles against a rate, a panel per metric, the SLOs as red rules."""
    base = alt.Chart(data(rows), width=width, height=220)
    lines = base.mark_line(point=True).encode(
        x=alt.X(
            f"{x}:Q", title=x_title, scale=alt.Scale(zero=True), axis=alt.Axis(format=NUMBER_AXIS)
        ),
        y=alt.Y("latency_ms:Q", title="milliseconds"),
        color=series_color(rows, "series"),
        strokeDash=alt.StrokeDash("statistic:N", title=None),
        detail="run_id:N",
        tooltip=["series:N", "load_level:Q", "statistic:N", f"{x}:Q", "latency_ms:Q"],
    )
    slo = base.mark_rule(color="firebrick", strokeDash=[4, 3]).encode(y="slo_ms:Q")
    return (
        alt.layer(lines, slo)
        .facet(column=alt.Column("metric:N", title=None, sort=metrics))
        .resolve_scale(y="independent")
    )


def _batch_sizes(rows: pa.Table):
    return (
        alt.Chart(data(rows), width=WIDTH)
        .mark_bar()
        .encode(
            x=alt.X("batch_size:O", title="requests in the batch"),
            y=alt.Y("share:Q", title="share of batches", axis=share_axis()),
            color=series_color(rows, "run_id"),
            xOffset="run_id:N",
            tooltip=["run_id:N", "batch_size:O", "batches:Q", "share:Q", "time_share:Q"],
        )
    )


def _deciles(rows: pa.Table):
    return (
        alt.Chart(data(rows), width=WIDTH // 2 - 30)
        .mark_bar()
        .encode(
            x=alt.X("decile:O", title="decile of the run"),
            y=alt.Y("error_rate:Q", title="error rate", axis=share_axis()),
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
            y=alt.Y("error_rate:Q", title="error rate", axis=share_axis()),
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
            x=alt.X("share:Q", stack="normalize", title="share of requests", axis=share_axis()),
            color=alt.Color("execution_mode:N", title="execution mode"),
            tooltip=["run_id:N", "execution_mode:N", "requests:Q", "errors:Q"],
        )
    )


def _latency(rows: pa.Table):
    line = (
        alt.Chart(data(rows), width=WIDTH)
        .mark_line(interpolate="step-after")
        .encode(
            x=alt.X("latency_s:Q", title="latency (s)"),
            y=alt.Y("share:Q", title="share of successful requests", axis=share_axis()),
            color=alt.Color("mode:N", title="run and mode"),
        )
    )
    return with_lone_points(line, ["mode"])


REPORT = ReportDefinition(
    name="serving",
    title="kvtrace serving report",
    summary="Latency against throughput and against the request rate across load levels, "
    "the batch-size distribution of simulated runs and the serving-benchmark "
    "table; error rates over the run (equal-time and equal-count bins), per worker and "
    "per session; the execution-mode mix; latency per mode.",
    select=select,
    sections=(
        Section(
            "latency_throughput",
            "Latency against throughput",
            "One point per load level (a benchmark run, or a line of an SGLang sweep); "
            "solid: median, dashed: p99; red: the SLO given with --slo.",
            chart=_latency_throughput,
            empty="No run recorded request latencies.",
        ),
        Section(
            "latency_load",
            "Latency against load",
            "TTFT and TPOT at each request rate a benchmark asked for (solid: median, "
            "dashed: p99; red: the SLO given with --slo).  serving_capacity(run, ...) "
            "predicts these points from a fitted batch-time model.",
            chart=_latency_load,
            empty="No measured load level recorded a finite request rate.",
        ),
        Section(
            "batch_sizes",
            "Batch-size distribution",
            "Batches a simulator scheduled, by the requests they held: the share of the "
            "run's batches (tooltip: their share of its execution time).",
            chart=_batch_sizes,
            empty="No run holds simulated batches (batch_metrics).",
        ),
        Section(
            "benchmark",
            "Serving-benchmark table",
            "In the layout serving benchmarks print; source says whether a number is the "
            "tool's own summary or computed from its per-request records.",
        ),
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
