"""Every chart of kvtrace's HTML reports, as Altair charts from Python (in Jupyter they
draw inline).

A chart is named ``<report>.<query>``: the report it belongs to and the query its
section draws (``dsa.offset_cdf``, ``serving.latency_throughput``); `names` lists them.
The charts are the reports' own: `chart` selects the runs as ``kvtrace report`` does,
runs the section's query and hands its rows to the same function that draws the
section in the HTML page.

- `names` (report=None) -> the chart names, in the reports' order;
- `about` (name) -> the section's title and caption;
- `chart` (name, warehouse, run=..., experiment=..., **settings) -> one chart;
- `charts` (report, warehouse, ...) -> every chart of one report, its runs selected once;
- `frame` (name, warehouse, ...) -> the rows a chart draws, as a polars DataFrame;
- `from_rows` (name, rows) -> a chart drawn from rows of your own (Arrow or polars);
- `inline` () -> draw charts in a notebook from Vega-Lite's mimetype (no network where
  the front end draws Vega-Lite itself), with Altair's HTML beside it for the others.

``run`` and ``experiment`` take what ``kvtrace report``'s ``--run`` and ``--experiment``
take (one value or a list); ``settings`` are the values a report's queries read
(``slo_ttft_ms=300`` for the serving report, as ``--slo ttft=300`` gives it).
Only the report registry loads with this module; Altair and DuckDB load on first use.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from kvtrace.errors import InputError
from kvtrace.reports import report_names

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa

    from kvtrace.reports.scoped import ReportDefinition, ScopedReport, Section
    from kvtrace.warehouse import Warehouse

__all__ = ["about", "chart", "charts", "frame", "from_rows", "inline", "names"]

Values = str | Sequence[str] | None


def names(report: str | None = None) -> tuple[str, ...]:
    """Every chart's name (``<report>.<query>``), or those of one ``report``."""
    reports = _reports()
    if report is not None:
        reports = {report: _report(report)}
    return tuple(
        _name(definition, section)
        for definition in reports.values()
        for section in definition.sections
        if section.chart is not None
    )


def about(name: str) -> str:
    """What the chart shows: its section's title, then its caption."""
    _, section = _lookup(name)
    return f"{section.title}: {section.caption}" if section.caption else section.title


def chart(
    name: str,
    warehouse: Warehouse | str | os.PathLike[str] | None = None,
    *,
    run: Values = None,
    experiment: Values = None,
    **settings: Any,
) -> Any:
    """The chart ``name`` over the runs ``run`` / ``experiment`` select (default: every
    run the report covers), as its report draws it; InputError when it has nothing to
    draw, saying why."""
    definition, section = _lookup(name)
    with _scoped(definition, warehouse, run, experiment, settings) as report:
        return _drawn(name, section, report.rows(section))


def charts(
    report: str,
    warehouse: Warehouse | str | os.PathLike[str] | None = None,
    *,
    run: Values = None,
    experiment: Values = None,
    **settings: Any,
) -> dict[str, Any]:
    """Every chart of ``report`` that has something to draw, by name, in the report's order;
    its runs are selected (and a what-if simulated) once for all of them."""
    definition = _report(report)
    with _scoped(definition, warehouse, run, experiment, settings) as scoped:
        drawn = {}
        for section in definition.sections:
            rows = scoped.rows(section) if section.chart is not None else None
            if rows is not None and not section.nothing_to_show(rows):
                name = _name(definition, section)
                drawn[name] = _drawn(name, section, rows)
        return drawn


def frame(
    name: str,
    warehouse: Warehouse | str | os.PathLike[str] | None = None,
    *,
    run: Values = None,
    experiment: Values = None,
    **settings: Any,
) -> pl.DataFrame:
    """The rows chart ``name`` draws (its section's query), as a polars DataFrame."""
    import polars as pl

    definition, section = _lookup(name)
    with _scoped(definition, warehouse, run, experiment, settings) as report:
        table = pl.from_arrow(report.rows(section))
    assert isinstance(table, pl.DataFrame)
    return table


def from_rows(name: str, rows: pa.Table | pl.DataFrame) -> Any:
    """Chart ``name`` drawn from ``rows`` of your own, with the columns its query
    returns (`frame` shows them)."""
    import pyarrow as pa

    _, section = _lookup(name)
    table = rows if isinstance(rows, pa.Table) else rows.to_arrow()
    return _drawn(name, section, table)


def inline() -> None:
    """Make Altair display every chart as Vega-Lite's mimetype (drawn by JupyterLab-style
    front ends with no network) beside its HTML output (Vega from a CDN)."""
    from kvtrace.charts._renderer import enable

    enable()


def _drawn(name: str, section: Section, rows: pa.Table) -> Any:
    from kvtrace.reports.scoped import drawn

    why = section.nothing_to_show(rows)
    if why:  # no rows, or nothing in them to draw: the report's line says why
        raise InputError(f"chart {name} has nothing to draw: {why}")
    return drawn(section, rows)


def _scoped(
    definition: ReportDefinition,
    warehouse: Warehouse | str | os.PathLike[str] | None,
    run: Values,
    experiment: Values,
    settings: dict[str, Any],
) -> AbstractContextManager[ScopedReport]:
    from kvtrace.defaults import default_path
    from kvtrace.reports.scoped import scoped
    from kvtrace.warehouse import Warehouse

    if warehouse is not None and not isinstance(warehouse, (Warehouse, str, os.PathLike)):
        raise InputError(
            "kvtrace.charts takes the warehouse's path or a Warehouse, "
            f"not a {type(warehouse).__name__}"
        )
    if not isinstance(warehouse, Warehouse):
        warehouse = Warehouse(warehouse or default_path())
    return scoped(
        warehouse,
        definition,
        runs=_listed(run),
        experiments=_listed(experiment),
        settings=settings,
        strict=True,
    )


def _listed(values: Values) -> list[str]:
    if values is None:
        return []
    return [values] if isinstance(values, str) else list(values)


def _name(definition: ReportDefinition, section: Section) -> str:
    return f"{definition.name}.{section.query}"


def _lookup(name: str) -> tuple[ReportDefinition, Section]:
    known = names()
    if name not in known:
        raise InputError(_unknown("chart", name, known, "kvtrace.charts.names() lists them"))
    report, _, query = name.partition(".")
    definition = _report(report)
    return definition, next(s for s in definition.sections if s.query == query and s.chart)


def _report(name: str) -> ReportDefinition:
    reports = _reports()
    if name not in reports:
        known = report_names()
        raise InputError(_unknown("report", name, known, "the reports: " + ", ".join(known)))
    return reports[name]


def _reports() -> dict[str, ReportDefinition]:
    from kvtrace.reports import reports

    return reports()


def _unknown(what: str, name: str, known: Sequence[str], listing: str) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"no {what} is named {name!r}: {hint}{listing}"
