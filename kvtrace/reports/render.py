"""Run a report's queries over a warehouse and render the page."""

from __future__ import annotations

from datetime import datetime, timezone

import duckdb
import pyarrow as pa

from kvtrace._version import __version__
from kvtrace.analysis import open_analysis_connection
from kvtrace.errors import QueryError
from kvtrace.reports import _charts as charts
from kvtrace.reports._html import RenderedSection, page
from kvtrace.reports._model import ReportDefinition, load_queries
from kvtrace.warehouse import Warehouse


def render_report(
    warehouse: Warehouse,
    report: ReportDefinition,
    *,
    runs: list[str],
    experiments: list[str],
    command_line: str,
    generated_at: datetime | None = None,
    settings: dict[str, float] | None = None,
) -> str:
    """The HTML of ``report`` over the runs that ``runs`` / ``experiments`` select;
    ``settings`` are the user's values its queries read (``getvariable``)."""
    con = open_analysis_connection(warehouse)
    try:
        scope = report.select(con, runs, experiments)
        scope.variables.update(settings or {})
        for name, value in sorted(scope.variables.items()):
            con.execute(f"SET VARIABLE {name} = ?", [value])
        queries = load_queries(report.name)
        results: dict[str, pa.Table] = {}  # a query shown as a table and a chart runs once
        sections = []
        for number, section in enumerate(report.sections, 1):
            sql = queries[section.query]
            if section.query not in results:
                try:
                    results[section.query] = con.sql(sql).to_arrow_table()
                except duckdb.Error as exc:
                    raise QueryError(
                        f"the {report.name} report's query {section.query} "
                        f"failed: {str(exc).splitlines()[0]}"
                    ) from None
            table = results[section.query]
            rendered = RenderedSection(
                anchor=f"s{number}",
                title=section.title,
                caption=section.caption,
                sql=sql,
                max_rows=section.max_rows,
                empty=section.empty,
                warning=section.warning(table) if section.warning and table.num_rows else "",
            )
            if section.chart is None:
                rendered.table = table
            elif table.num_rows:
                rendered.spec = charts.spec(section.chart(table))
            sections.append(rendered)
    finally:
        con.close()
    provenance = [
        ("Command", command_line),
        ("kvtrace", __version__),
        ("Warehouse version", str(warehouse.version)),
        *[("Selection", line) for line in scope.lines],
        *[
            (f"Setting {name}", "none" if value is None else str(value))
            for name, value in sorted(scope.variables.items())
        ],
    ]
    stamp = (generated_at or datetime.now(timezone.utc)).isoformat(timespec="seconds")
    return page(
        title=report.title,
        summary=report.summary,
        provenance=provenance,
        generated_at=stamp,
        sections=sections,
    )
