"""Run a report's queries over a warehouse and render the page."""

from __future__ import annotations

from datetime import datetime, timezone

from kvtrace._version import __version__
from kvtrace.reports import _charts as charts
from kvtrace.reports._html import RenderedSection, page
from kvtrace.reports._model import ReportDefinition
from kvtrace.reports.scoped import scoped
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
    with scoped(
        warehouse, report, runs=runs, experiments=experiments, settings=settings
    ) as scoped_report:
        scope = scoped_report.scope
        sections = []
        for number, section in enumerate(report.sections, 1):
            table = scoped_report.rows(section)
            rendered = RenderedSection(
                anchor=f"s{number}",
                title=section.title,
                caption=section.caption,
                sql=scoped_report.sql(section),
                max_rows=section.max_rows,
                empty=section.empty,
                warning=section.warning(table) if section.warning and table.num_rows else "",
            )
            why_blank = section.nothing_to_show(table) if table.num_rows else ""
            if why_blank:  # rows, but nothing in them to draw: one line says why
                rendered.empty = why_blank
            elif section.chart is None:
                rendered.table = table
            elif table.num_rows:
                rendered.spec = charts.spec(section.chart(table))
            sections.append(rendered)
    provenance = [
        ("Command", command_line),
        ("kvtrace", __version__),
        ("Warehouse version", str(warehouse.version)),
        ("Selection", "\n".join(scope.lines)),
    ]
    if settings:  # the user's; the selector's own values are in its selection lines
        provenance.append(
            (
                "Settings",
                "; ".join(f"{name} = {value:g}" for name, value in sorted(settings.items())),
            )
        )
    stamp = (generated_at or datetime.now(timezone.utc)).isoformat(timespec="seconds")
    return page(
        title=report.title,
        summary=report.summary,
        provenance=provenance,
        generated_at=stamp,
        sections=sections,
        warning=scope.warning,
    )
