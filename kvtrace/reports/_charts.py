"""Helpers the reports' charts share: rows to inline chart data, common chart shapes."""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import altair as alt
import pyarrow as pa

from kvtrace.reports._format import COUNT_AXIS, SHARE_AXIS

WIDTH = 640


def rows(table: pa.Table) -> list[dict[str, Any]]:
    """Rows for an inline dataset: floats to 6 significant digits, NaN and inf as null
    (JSON has neither), timestamps as ISO text."""
    out = []
    for row in table.to_pylist():
        out.append({key: _plain(value) for key, value in row.items()})
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        value = float(value)
    if isinstance(value, float):
        return None if not math.isfinite(value) else float(f"{value:.6g}")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def data(table: pa.Table) -> alt.Data:
    return alt.Data(values=rows(table))


def series_color(table: pa.Table, field: str = "series") -> Any:
    """Colour by ``field`` only when the rows hold more than one of it."""
    if field in table.column_names and len(set(table[field].to_pylist())) > 1:
        return alt.Color(f"{field}:N", title=field)
    return alt.Undefined


def capacity_curve(
    rows: pa.Table, *, x_title: str, color: Any, by: str, by_title: str
) -> alt.Chart:
    """Hit rate (0 to 1) against cache capacity in blocks on a log2 axis, a line with
    points per series: colour by ``color``, and ``by`` (a second field) told apart by
    the line's dashes and the points' shapes, under one legend (that of the shapes: a
    dash legend of a line with points would show the same dot for every value)."""
    return (
        alt.Chart(data(rows), width=WIDTH)
        .mark_line(point=True)
        .encode(
            x=alt.X("capacity_blocks:Q", scale=alt.Scale(type="log", base=2), title=x_title),
            y=alt.Y(
                "hit_rate:Q",
                title="hit rate",
                scale=alt.Scale(domain=[0, 1]),
                axis=share_axis(),
            ),
            color=color,
            strokeDash=alt.StrokeDash(f"{by}:N", legend=None),
            shape=alt.Shape(f"{by}:N", title=by_title),
        )
    )


def with_lone_points(line: alt.Chart, series: list[str]) -> alt.LayerChart:
    """``line`` with a point for each series of one row, which a line alone leaves
    undrawn (``series``: the fields that tell its series apart)."""
    lone = (
        line.mark_point(filled=True)
        .transform_joinaggregate(rows_in_series="count()", groupby=series)
        .transform_filter("datum.rows_in_series == 1")
    )
    return alt.LayerChart(layer=[line, lone])


def count_axis() -> alt.Axis:
    """An axis of counts: whole-number ticks with thousands separators (never 0.5 of a
    row), by the reports' number rule (`kvtrace.reports._format`)."""
    return alt.Axis(format=COUNT_AXIS, tickMinStep=1)


def share_axis() -> alt.Axis:
    """An axis of shares (0 to 1) as percentages without trailing zeros: 40%, 0.5%."""
    return alt.Axis(format=SHARE_AXIS)


def blank_when_zero(field: str, why: str) -> Callable[[pa.Table], str]:
    """A section's ``blank``: ``why`` when ``field`` is 0 or missing in every row (bars
    of length 0 draw an empty frame)."""

    def blank(rows: pa.Table) -> str:
        return "" if any(rows[field].to_pylist()) else why

    return blank


def blank_when_missing(field: str, why: str) -> Callable[[pa.Table], str]:
    """A section's ``blank``: ``why`` when ``field`` is missing (null or NaN) in every row."""

    def blank(rows: pa.Table) -> str:
        present = [v for v in rows[field].to_pylist() if v is not None and v == v]
        return "" if present else why

    return blank


LEGEND_LABEL_LIMIT = 480  # pixels of a legend label (Vega's default, 160, cuts run ids)


def configured(chart: Any) -> Any:
    """The chart as reports and notebooks show it: legends that show their labels whole."""
    return chart.configure_legend(labelLimit=LEGEND_LABEL_LIMIT)


def spec(chart: Any) -> dict:
    """The chart's Vega-Lite spec as `configured`, checked against the schema by altair."""
    return configured(chart).to_dict()
