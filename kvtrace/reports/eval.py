"""The eval report: accuracy, error classes, a run-to-run diff and needle recall."""

from __future__ import annotations

import altair as alt
import duckdb
import pyarrow as pa

from kvtrace.reports._charts import WIDTH, blank_when_zero, data, share_axis
from kvtrace.reports._model import ReportDefinition, Scope, Section
from kvtrace.reports._selection import select_runs

BLOCK_SIZE = 64


def select(con: duckdb.DuckDBPyConnection, runs: list[str], experiments: list[str]) -> Scope:
    lines = select_runs(
        con,
        "SELECT DISTINCT e.run_id, r.run_name, NULL AS experiment "
        "FROM eval_samples e LEFT JOIN runs r USING (run_id)",
        runs=runs,
        experiments=experiments,
        what="evaluated runs",
    )
    chosen = dict(con.execute("SELECT run_id, run_name FROM report_runs").fetchall())
    ordered = [r for r in runs if r in chosen or r in chosen.values()] or sorted(chosen)
    run_a = ordered[0]
    run_b = ordered[1] if len(ordered) > 1 else None
    if run_b is not None:
        lines.append(f"diff: {run_a} -> {run_b}")
    lines.append(f"needle recall at {BLOCK_SIZE}-token blocks")
    return Scope(lines, {"run_a": run_a, "run_b": run_b, "block_size": BLOCK_SIZE})


def _accuracy(rows: pa.Table):
    return (
        alt.Chart(data(rows), width=WIDTH)
        .mark_bar()
        .encode(
            x=alt.X(
                "ruler_score:Q",
                title="RULER score (mean score x 100)",
                scale=alt.Scale(domain=[0, 100]),
            ),
            y=alt.Y("task:N", title="task"),
            color=alt.Color("run:N", title="run"),
            yOffset="run:N",
        )
    )


def _needle_recall(rows: pa.Table):
    return (
        alt.Chart(data(rows), width=WIDTH)
        .mark_line(point=True)
        .encode(
            x=alt.X("layer_id:O", title="layer"),
            y=alt.Y(
                "needle_block_recall:Q",
                title="needle blocks the top-k touched (mean)",
                scale=alt.Scale(domain=[0, 1]),
                axis=share_axis(),
            ),
            color=alt.Color("answer:N", title="answer"),
            strokeDash=alt.StrokeDash("run:N", title="run"),
        )
    )


REPORT = ReportDefinition(
    name="eval",
    title="kvtrace evaluation report",
    summary="How the selected runs answered (scored the RULER way), how they went wrong, "
    "what changed between two of them, and whether the sparse selection saw the "
    "needle.",
    select=select,
    sections=(
        Section(
            "accuracy",
            "Accuracy by task and context length",
            "A sample is right when its score is 1.",
            chart=_accuracy,
            blank=blank_when_zero(
                "ruler_score",
                "Every selected run scored 0 on every task: no sample was answered right "
                "(the error classes below say how they went wrong).",
            ),
        ),
        Section(
            "error_classes",
            "Error classes",
            "empty, format, repetition_loop, partial, wrong_value: rules in the eval_samples docs.",
        ),
        Section(
            "diff",
            "What changed between the first two runs",
            "Exact McNemar test on the samples one run got right and the other wrong.",
            empty="Give two runs (--run a --run b) to compare them.",
        ),
        Section(
            "needle_recall",
            "Needle recall per layer, right and wrong answers",
            "Collected RULER runs only: the share of the needle's blocks that each "
            "decode step's top-k touched.",
            chart=_needle_recall,
            empty="No traced run with needle spans: collect with --dataset ruler.",
        ),
        Section("errors", "Wrong samples", max_rows=100),
    ),
)
