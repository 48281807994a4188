"""kvtrace.charts: every report's charts from Python, drawn by the reports' own chart
functions (the specs a report page embeds), over the runs a report would select."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime, timezone

import altair as alt
import nbformat
import polars as pl
import pyarrow as pa
import pytest

import kvtrace
from kvtrace.errors import InputError
from kvtrace.reports import reports
from kvtrace.reports.render import render_report
from kvtrace.warehouse import Warehouse

_SPECS = re.compile(r'<script type="application/json" id="s\d+-spec">(.*?)</script>')


def _page_specs(html: str) -> list[dict]:
    """The Vega-Lite specs a report page embeds, in the page's order."""
    return [json.loads(text) for text in _SPECS.findall(html)]


def test_every_chart_of_every_report_has_one_name():
    expected = [
        f"{name}.{section.query}"
        for name, definition in reports().items()
        for section in definition.sections
        if section.chart is not None
    ]
    assert list(kvtrace.charts.names()) == expected
    assert len(set(expected)) == len(expected)
    assert kvtrace.charts.names("whatif")[0] == "whatif.hit_curves"
    assert kvtrace.charts.about("dsa.offset_cdf") == (
        "Offset CDF: How far back selections reach; log axis."
    )


@pytest.mark.parametrize(
    ("report", "settings", "cli_settings"),
    [
        ("dsa", {}, {}),
        ("serving", {"slo_ttft_ms": 300.0}, {"slo_ttft_ms": 300.0}),
        ("pool", {}, {}),
        ("whatif", {}, {}),
        ("eval", {}, {}),
        ("workload", {}, {}),
        ("timeline", {}, {}),
    ],
)
def test_the_charts_are_those_the_report_page_draws(tour, report, settings, cli_settings):
    """The same chart functions: each chart's spec is the one ``kvtrace report`` embeds
    (a report draws a section only when its query has rows; so does `charts`)."""
    location = str(tour / "kvtrace-warehouse")
    html = render_report(
        Warehouse(location),
        reports()[report],
        runs=[],
        experiments=[],
        command_line="kvtrace report",
        generated_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
        settings=cli_settings,
    )
    drawn = kvtrace.charts.charts(report, location, **settings)
    assert drawn and [chart.to_dict() for chart in drawn.values()] == _page_specs(html)


def test_a_run_selects_what_a_chart_draws(tour):
    """The dsa report reads each run at 64-token blocks (the demo traces 16 and 64): the
    unique-blocks histogram counts one row per (request, decode step, layer) of the
    trace at 64."""
    location = str(tour / "kvtrace-warehouse")
    con = kvtrace.connect(location)
    ((run_id,),) = con.execute("SELECT run_id FROM runs WHERE kind = 'dsa'").fetchall()
    ((steps,),) = con.execute("SELECT count(*) FROM dsa_steps WHERE block_size = 64").fetchall()
    rows = kvtrace.charts.frame("dsa.unique_blocks", location, run="demo-ruler-dsa-ref")
    assert isinstance(rows, pl.DataFrame)
    assert rows["series"].unique().to_list() == [f"{run_id} B=64"]
    assert rows["rows"].sum() == steps > 0
    with pytest.raises(InputError, match="no DSA runs in the warehouse match --run nothing"):
        kvtrace.charts.chart("dsa.offset_cdf", location, run="nothing")


def test_rows_of_ones_own_are_drawn_by_the_same_chart():
    # two series of the offset CDF: "a" reaches 1 and 4 tokens back, "b" 2 back
    rows = pa.table(
        {
            "series": ["a", "a", "b"],
            "offset_plus_one": [1, 4, 2],
            "cdf": [0.5, 1.0, 1.0],
        }
    )
    from_arrow = kvtrace.charts.from_rows("dsa.offset_cdf", rows).to_dict()
    from_polars = kvtrace.charts.from_rows("dsa.offset_cdf", pl.from_arrow(rows)).to_dict()
    assert from_arrow == from_polars
    line = from_arrow["layer"][0]  # the line, then the points of one-row series
    assert from_arrow["data"]["values"] == rows.to_pylist()
    assert line["encoding"]["x"]["field"] == "offset_plus_one"
    assert line["encoding"]["color"]["field"] == "series"  # two series: coloured
    assert from_arrow["config"]["legend"]["labelLimit"] == 480  # the reports' look


def test_names_settings_and_empty_charts_are_one_sentence(tour):
    location = str(tour / "kvtrace-warehouse")
    with pytest.raises(InputError, match=r"no chart is named 'dsa\.offset': did you mean "):
        kvtrace.charts.chart("dsa.offset", location)
    with pytest.raises(InputError, match=r"no report is named 'dsa2'.*the reports: dsa, pool"):
        kvtrace.charts.charts("dsa2", location)
    with pytest.raises(
        InputError, match=r"read no setting 'slo_ttft' \(the settings they read: .*slo_ttft_ms"
    ):
        kvtrace.charts.chart("serving.latency_throughput", location, slo_ttft=300)
    with pytest.raises(InputError, match="the warehouse's path or a Warehouse, not a Guarded"):
        kvtrace.charts.chart("dsa.offset_cdf", kvtrace.connect(location))
    # the dsa report picks its block size from the runs; a chart cannot be told another
    with pytest.raises(InputError, match="works out block_size from the runs it selects"):
        kvtrace.charts.chart("dsa.offset_cdf", location, block_size=16)
    # the tour's workload is an arrival trace with no benchmark: no latencies to draw
    (section,) = [s for s in reports()["workload"].sections if s.query == "latency_cdf"]
    with pytest.raises(InputError) as raised:
        kvtrace.charts.chart("workload.latency_cdf", location)
    assert str(raised.value) == f"chart workload.latency_cdf has nothing to draw: {section.empty}"
    assert "workload.latency_cdf" not in kvtrace.charts.charts("workload", location)


def test_inline_charts_carry_vega_lite_in_a_bundle_notebooks_accept():
    """Altair 6's own 'mimetype' renderer names its output application/vnd.vegalite.v6.json,
    which nbformat refuses for a JSON object; `inline` uses the +json name."""
    chart = kvtrace.charts.from_rows(
        "dsa.unique_blocks", pa.table({"series": ["a"], "unique_blocks": [3], "rows": [2]})
    )
    active = alt.renderers.active
    kvtrace.charts.inline()
    try:
        bundle = chart._repr_mimebundle_()
    finally:
        alt.renderers.enable(active)
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    major = alt.SCHEMA_VERSION.split(".")[0]
    assert data[f"application/vnd.vegalite.{major}+json"] == chart.to_dict()
    assert "vegaEmbed" in data["text/html"]
    nbformat.v4.new_output("display_data", data=data)  # validates it, as nbclient does


def test_import_kvtrace_loads_charts_only_when_used():
    probe = (
        "import sys, kvtrace\n"
        "assert not {'kvtrace.charts', 'altair', 'duckdb'} & set(sys.modules), sys.modules\n"
        "assert 'dsa.offset_cdf' in kvtrace.charts.names()\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
