"""The timeline report: where GPU time goes per stream, and whether copies hide."""

from __future__ import annotations

import altair as alt
import pyarrow as pa

from kvtrace.reports.charts import WIDTH, data
from kvtrace.reports.model import ReportDefinition, Section
from kvtrace.reports.selection import runs_in


def _stream_busy(rows: pa.Table):
    return alt.Chart(data(rows), width=WIDTH).mark_bar().encode(
        x=alt.X("us:Q", title="microseconds of the iteration's GPU window", stack="zero"),
        y=alt.Y("stream:N", title="stream"),
        color=alt.Color("state:N", title="state",
                        scale=alt.Scale(domain=["busy", "idle"])),
    ).facet(row=alt.Row("iteration:O", title="iteration"))


def _copy_bars(rows: pa.Table):
    return alt.Chart(data(rows), width=WIDTH).mark_bar().encode(
        x=alt.X("us:Q", title="copy time (microseconds)", stack="zero"),
        y=alt.Y("copy_kind:N", title="copy"),
        color=alt.Color("part:N", title="", scale=alt.Scale(domain=["hidden", "exposed"])),
    ).facet(row=alt.Row("iteration:O", title="iteration"))


REPORT = ReportDefinition(
    name="timeline",
    title="kvtrace profiler timeline report",
    summary="Where the GPU time of the selected profiler traces goes, stream by stream and "
            "iteration by iteration, and how much of the copy time hides behind kernels.",
    select=runs_in("(SELECT DISTINCT run_id, NULL AS experiment FROM timeline_events)",
                   "profiler traces"),
    sections=(
        Section("stream_busy", "Busy and idle time per stream",
                "Busy time is the union of a stream's events; idle is the rest of the "
                "iteration's GPU window.", chart=_stream_busy),
        Section("copy_bars", "Copy time hidden behind kernels",
                "A copy is hidden where any kernel runs at the same time.", chart=_copy_bars,
                empty="No copies in the selected traces."),
        Section("copy_overlap", "Copies per iteration and direction",
                empty="No copies in the selected traces."),
        Section("kernel_breakdown", "GPU time by kernel type",
                "HTA's types: communication (nccl), memory (copies, memsets), computation."),
        Section("top_kernels", "The kernels with the most GPU time"),
    ),
)
