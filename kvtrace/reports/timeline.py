"""The timeline report: where GPU time goes per stream, and whether copies hide."""

from __future__ import annotations

import altair as alt
import pyarrow as pa

from kvtrace.reports._charts import WIDTH, count_axis, data, share_axis
from kvtrace.reports._format import natural_order
from kvtrace.reports._model import ReportDefinition, Section
from kvtrace.reports._selection import runs_in


def _lanes(rows: pa.Table) -> alt.Row:
    """One facet row per lane, streams in number order (7, 23, 203), not as text."""
    return alt.Row(
        "lane:N",
        title="",
        header=alt.Header(labelAngle=0, labelAlign="left"),
        sort=natural_order(rows["lane"].to_pylist()),
    )


def _lane_bars(part: str, parts: list[str], y_title: str):
    """Stacked bars per iteration, one row per lane, each with its own scales."""

    def chart(rows: pa.Table):
        return (
            alt.Chart(data(rows), width=WIDTH, height=70)
            .mark_bar()
            .encode(
                x=alt.X("iteration:O", title="iteration", axis=alt.Axis(labelOverlap=True)),
                y=alt.Y("us:Q", title=y_title, stack="zero"),
                color=alt.Color(f"{part}:N", title="", scale=alt.Scale(domain=parts)),
                tooltip=["lane:N", "iteration:O", f"{part}:N", "us:Q"],
            )
            .facet(row=_lanes(rows))
            .resolve_scale(x="independent", y="independent")
        )

    return chart


def _gantt(rows: pa.Table):
    return (
        alt.Chart(data(rows), width=WIDTH)
        .mark_bar(height=14)
        .encode(
            x=alt.X("start_us:Q", title="microseconds since the iteration's first GPU event"),
            x2="end_us:Q",
            y=alt.Y("stream:N", title="", sort=natural_order(rows["stream"].to_pylist())),
            color=alt.Color("what:N", title="what ran"),
            tooltip=["stream:N", "what:N", "start_us:Q", "end_us:Q"],
        )
        .facet(row=alt.Row("run:N", title=""))
        .resolve_scale(x="independent", y="independent")
    )


def _bandwidth(rows: pa.Table):
    return (
        alt.Chart(data(rows), width=WIDTH)
        .mark_bar(opacity=0.75)
        .encode(
            x=alt.X("gbps:Q", title="GB/s"),
            x2="gbps_end:Q",
            y=alt.Y("copies:Q", title="copies of at least 1 MB", axis=count_axis()),
            y2=alt.datum(0),
            color=alt.Color("copy_kind:N", title="copy"),
            tooltip=["copy_kind:N", "gbps:Q", "gbps_end:Q", "copies:Q"],
        )
        .facet(row=alt.Row("run:N", title=""))
        .resolve_scale(x="independent")
    )


def _critical_path(rows: pa.Table):
    return (
        alt.Chart(data(rows), width=WIDTH)
        .mark_bar()
        .encode(
            x=alt.X(
                "share:Q",
                title="share of the critical path",
                stack="zero",
                scale=alt.Scale(domain=[0, 1], clamp=True),
                axis=share_axis(),
            ),
            y=alt.Y("run:N", title=""),
            color=alt.Color("bound_by:N", title="bound by"),
            tooltip=["run:N", "rank:O", "bound_by:N", "duration_us:Q", "share:Q"],
        )
    )


REPORT = ReportDefinition(
    name="timeline",
    title="kvtrace profiler timeline report",
    summary="Where the GPU time of the selected profiler traces goes, stream by stream and "
    "iteration by iteration, and how much of the copy time hides behind kernels.",
    select=runs_in(
        "(SELECT DISTINCT run_id, NULL AS experiment FROM timeline_events)", "profiler traces"
    ),
    sections=(
        Section(
            "stream_busy",
            "Busy and idle time per stream",
            "Each run's lowest rank, iteration by iteration: busy time is the union of "
            "a stream's events; idle is the rest of the iteration's GPU window.",
            chart=_lane_bars("state", ["busy", "idle"], "µs"),
            empty="No GPU events inside a ProfilerStep in the selected traces.",
        ),
        Section(
            "gantt",
            "A typical iteration, stream by stream",
            "The median iteration (by GPU window) of each run's lowest rank; each "
            "stream's events of one kind merged into busy intervals.",
            chart=_gantt,
            empty="No GPU events inside a ProfilerStep in the selected traces.",
        ),
        Section(
            "copy_bars",
            "Copy time hidden behind compute",
            "Each run's lowest rank: a copy is hidden where a computation kernel runs "
            "at the same time.",
            chart=_lane_bars("part", ["hidden", "exposed"], "copy µs"),
            empty="No copies in the selected traces.",
        ),
        Section(
            "copy_overlap",
            "Copies per iteration and direction",
            empty="No copies in the selected traces.",
        ),
        Section(
            "copy_bandwidth",
            "Copy bandwidth",
            "Copies of at least 1 MB, by direction. Host-device copies (HtoD, DtoH) "
            "cross PCIe: 4.0 x16 moves about 25 GB/s each way, 5.0 x16 about 50. "
            "Device-to-device copies (DtoD) stay in GPU memory and are bounded by its "
            "bandwidth (hundreds of GB/s and more), not by PCIe.",
            chart=_bandwidth,
            empty="No copies of at least 1 MB in the selected traces.",
        ),
        Section(
            "temporal_breakdown",
            "Idle, compute and other GPU time (HTA's breakdown)",
            "With kvtrace's definitions (kernels, copies and memsets are GPU time) and "
            "HTA's (every event with a stream, CUDA syncs included).",
        ),
        Section(
            "comm_comp_overlap",
            "Communication hidden behind computation",
            empty="No NCCL kernels in the selected traces.",
        ),
        Section(
            "kernel_breakdown",
            "GPU time by kernel type",
            "HTA's types: communication (^nccl.*Kernel), memory (copies, memsets), "
            "computation, other.",
        ),
        Section(
            "critical_path",
            "What bounds the critical path of the first iteration",
            "The longest path through the first ProfilerStep's operators, launches, "
            "kernels and synchronisations (HTA's critical path analysis; CUDA-graph "
            "kernels included).",
            chart=_critical_path,
            empty="No ProfilerStep with CPU and GPU events in the selected traces.",
        ),
        Section(
            "kernel_sequences",
            "Frequent kernel sequences",
            "The outermost aten:: operators grouped by the kernels they launch, most "
            "frequent first (HTA's frequent CUDA kernel sequences).",
            empty="No aten:: operators that launch kernels in the selected traces.",
        ),
        Section(
            "top_kernels",
            "The kernels with the most GPU time",
            "Per run and rank, with the distribution of one launch's duration.",
        ),
    ),
)
