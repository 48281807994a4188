"""What a reader sees of a report: one legend per field, axis formats and table numbers
by one rule, a sentence where a chart would be an empty frame, streams in number order,
and the compare report's sides checked before the warehouse opens."""

from __future__ import annotations

import html
from typing import Any

import pyarrow as pa

from kvtrace.reports._charts import count_axis, spec
from kvtrace.reports._format import (
    COUNT_AXIS,
    NUMBER_AXIS,
    SHARE_AXIS,
    natural_order,
    number_column,
    number_text,
)
from kvtrace.reports._html import RenderedSection, page
from kvtrace.reports._selection import _described, _singular
from kvtrace.reports.compare import REPORT as COMPARE
from kvtrace.reports.eval import REPORT as EVAL
from kvtrace.reports.pool import REPORT as POOL
from kvtrace.reports.serving import _latency_throughput
from kvtrace.reports.timeline import _gantt, _lane_bars
from kvtrace.reports.whatif import _hit_curves
from kvtrace.reports.workload import _prefix_curve
from tests.test_cli import kvtrace


def _legend_titles(chart_spec: dict) -> list[str]:
    """The titles of the legends a (single-view) spec draws: one per channel that has a
    field and does not set ``legend: null``."""
    encoding = chart_spec["encoding"]
    return [
        channel.get("title", channel["field"])
        for name in ("color", "shape", "strokeDash", "size", "opacity")
        if (channel := encoding.get(name))
        and "field" in channel
        and channel.get("legend", {}) is not None
    ]


def _section(report: Any, title: str):
    return next(s for s in report.sections if s.title == title)


def test_the_hit_rate_chart_has_one_block_size_legend():
    rows = pa.table(
        {
            "run_id": ["r-1"] * 4,
            "policy": ["lru", "lru", "opt", "opt"],
            "block_size": ["B=16", "B=64", "B=16", "B=64"],
            "capacity_blocks": [4, 4, 4, 4],
            "hit_rate": [0.1, 0.2, 0.3, 0.4],
        }
    )
    chart_spec = spec(_hit_curves(rows))
    assert _legend_titles(chart_spec) == ["policy", "block size"]  # dashes: no legend
    assert chart_spec["encoding"]["y"]["axis"] == {"format": "~%"}  # a share: 40%


def test_the_workload_prefix_chart_has_one_run_legend():
    rows = pa.table(
        {
            "run": ["a", "b"],
            "cache": ["block cache, lru", "block cache, lru"],
            "capacity_blocks": [8, 8],
            "hit_rate": [0.5, 0.25],
        }
    )
    assert _legend_titles(spec(_prefix_curve(rows))) == ["cache", "run"]


def test_numbers_follow_one_rule():
    # a whole column: counts with separators, whatever their type (100.0 is a count)
    assert number_column([100.0, 9.0, None]) == (["100", "9", ""], True)
    assert number_column([60000.0]) == (["60,000"], True)
    # any other column: three significant digits each, all digits before the point
    # (the DSA summary's min and max of prefix_intersection_ratio: 0.0567 and 0.11)
    assert number_column([0.0567, 0.11, 2.0, 2871.0, 1548.3]) == (
        ["0.0567", "0.110", "2.00", "2,871", "1,548"],
        True,
    )
    assert number_text(0.0009999) == "0.00100"  # rounding up keeps three digits
    assert number_text(99.96) == "100"
    assert number_text(-2.5) == "-2.50"
    assert number_text(float("nan")) == "NaN"
    assert number_column(["a", 1]) == ([], False)
    assert number_column([True, False]) == ([], False)  # booleans are not numbers


def test_axes_use_the_rules_formats():
    assert (COUNT_AXIS, SHARE_AXIS, NUMBER_AXIS) == (",d", "~%", ",.3~r")
    assert count_axis().to_dict() == {"format": ",d", "tickMinStep": 1}
    deltas = _section(COMPARE, "Relative differences (serving and pool)").chart
    rows = pa.table(
        {
            "metric": ["errors"],
            "delta_rel": [0.25],
            "single_run": [False],
            "left_mean": [4.0],
            "right_mean": [5.0],
            "left_runs": [2],
            "right_runs": [2],
        }
    )
    assert spec(deltas(rows))["encoding"]["x"]["axis"] == {"format": "~%"}
    # one load level puts every point at one throughput: the axis starts at 0 and its
    # ticks keep three significant digits, not Vega's 0.900990
    sweep = pa.table(
        {
            "metric": ["TTFT"],
            "series": ["s"],
            "run_id": ["r"],
            "statistic": ["median"],
            "load_level": [0],
            "request_throughput": [0.90099],
            "latency_ms": [145.0],
            "slo_ms": [None],
        }
    )
    x = spec(_latency_throughput(sweep))["spec"]["layer"][0]["encoding"]["x"]
    assert x["axis"] == {"format": ",.3~r"} and x["scale"] == {"zero": True}


def test_a_chart_with_nothing_to_draw_says_why():
    accuracy = _section(EVAL, "Accuracy by task and context length")
    zeros = pa.table({"run": ["a", "a"], "task": ["niah", "vt"], "ruler_score": [0.0, 0.0]})
    assert accuracy.blank(zeros).startswith("Every selected run scored 0 on every task")
    assert accuracy.blank(zeros.set_column(2, "ruler_score", pa.array([0.0, 50.0]))) == ""
    throughput = _section(POOL, "Decode throughput by pool state")
    silent = pa.table({"worker": ["w"], "state": ["stuck"], "ticks": [5], "with_throughput": [0]})
    assert throughput.blank(silent).startswith("No tick reported last_gen_throughput")
    for title in ("Relative differences (serving and pool)", "Relative differences (DSA)"):
        deltas = _section(COMPARE, title)
        same = pa.table({"metric": ["a", "b"], "delta_rel": [0.0, None]})
        assert deltas.blank(same) == "The two sides do not differ: every relative difference is 0."


def test_an_empty_section_is_one_line_and_no_frame():
    text = page(
        title="t",
        summary="s",
        provenance=[("Selection", "1 run: a\nblock size 64")],
        generated_at="now",
        sections=[RenderedSection("s1", "Chart", "", "SELECT 1", empty="Nothing: because.")],
        warning="Both sides select the same runs",
    )
    assert "<p>Nothing: because.</p>" in text and 'class="figure"' not in text
    assert "<dd>1 run: a<br>block size 64</dd>" in text  # one Selection entry, two lines
    assert '<p class="warning">Both sides select the same runs</p>' in text


def test_streams_sort_by_number():
    assert natural_order(["s · stream 203", "s · stream 23", "s · stream 7", "s · stream 84"]) == [
        "s · stream 7",
        "s · stream 23",
        "s · stream 84",
        "s · stream 203",
    ]
    lanes = pa.table(
        {
            "lane": ["t · stream 25", "t · stream 203", "t · stream 7"],
            "iteration": [1, 1, 1],
            "state": ["busy", "busy", "busy"],
            "us": [1.0, 2.0, 3.0],
        }
    )
    bars = spec(_lane_bars("state", ["busy", "idle"], "µs")(lanes))
    assert bars["facet"]["row"]["sort"] == ["t · stream 7", "t · stream 25", "t · stream 203"]
    gantt_rows = pa.table(
        {
            "run": ["t", "t", "t"],
            "stream": ["stream 84", "stream 203", "stream 23"],
            "what": ["computation"] * 3,
            "start_us": [0.0, 1.0, 2.0],
            "end_us": [1.0, 2.0, 3.0],
        }
    )
    y = spec(_gantt(gantt_rows))["spec"]["encoding"]["y"]
    assert y["sort"] == ["stream 23", "stream 84", "stream 203"]


def test_the_header_names_a_run_once():
    # run name and experiment both "exp_sample", the id their name plus its hash
    assert _described("exp_sample-49a52a3d", "exp_sample", "exp_sample") == "exp_sample-49a52a3d"
    assert _described("r-0011aabb", "chat", "exp-a") == "r-0011aabb (chat, exp-a)"
    assert _described("r-0011aabb", None, None) == "r-0011aabb"
    assert [_singular(w) for w in ("pool runs", "DSA or profiler runs", "runs")] == [
        "pool run",
        "DSA or profiler run",
        "run",
    ]


def test_compare_without_two_sides_says_so_before_opening_the_warehouse(tmp_path):
    missing = tmp_path / "no-warehouse-here"
    out = tmp_path / "compare.html"
    for sides in ([], ["--experiment", "a"], ["--run", "a", "--experiment", "b"]):
        result = kvtrace("-w", str(missing), "report", "compare", *sides, "-o", str(out))
        assert result.returncode != 0
        message = html.unescape(result.stderr)
        assert "compare needs two sides: --experiment A --experiment B" in message, message
        assert "Traceback" not in message
    assert not missing.exists() and not out.exists()
