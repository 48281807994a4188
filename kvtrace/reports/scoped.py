"""A report's runs selected and its settings set on one connection, its sections' rows on
demand, and a section's chart drawn from rows: what the HTML page (`render`) and the
Python charts (`kvtrace.charts`) both draw from."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import duckdb
import pyarrow as pa

from kvtrace.analysis import open_analysis_connection
from kvtrace.errors import InputError, QueryError
from kvtrace.reports._charts import configured
from kvtrace.reports._model import ReportDefinition, Scope, Section, load_queries
from kvtrace.warehouse import Warehouse

__all__ = ["ReportDefinition", "ScopedReport", "Section", "drawn", "scoped"]


def drawn(section: Section, rows: pa.Table) -> Any:
    """The section's chart of ``rows`` as the report shows it (see `_charts.configured`)."""
    assert section.chart is not None
    return configured(section.chart(rows))


class ScopedReport:
    """``report`` over the runs its selector chose on ``con``: each section's query runs
    once, however many sections show it."""

    def __init__(
        self, con: duckdb.DuckDBPyConnection, report: ReportDefinition, scope: Scope
    ) -> None:
        self.con = con
        self.report = report
        self.scope = scope
        self.queries = load_queries(report.name)
        self._results: dict[str, pa.Table] = {}

    def sql(self, section: Section) -> str:
        """The section's query, with its comment header."""
        return self.queries[section.query]

    def rows(self, section: Section) -> pa.Table:
        """The rows of the section's query (run once per query)."""
        if section.query not in self._results:
            try:
                self._results[section.query] = self.con.sql(self.sql(section)).to_arrow_table()
            except duckdb.Error as exc:
                raise QueryError(
                    f"the {self.report.name} report's query {section.query} "
                    f"failed: {str(exc).splitlines()[0]}"
                ) from None
        return self._results[section.query]


@contextmanager
def scoped(
    warehouse: Warehouse,
    report: ReportDefinition,
    *,
    runs: list[str],
    experiments: list[str],
    settings: Mapping[str, Any] | None = None,
    strict: bool = False,
) -> Iterator[ScopedReport]:
    """``report`` with its runs selected from ``runs`` / ``experiments`` (InputError when
    nothing matches) and its settings (``getvariable``) set: the selector's, then the
    user's ``settings``; the connection closes on leaving.  ``strict`` refuses a setting
    the queries never read or the selector sets itself."""
    con = open_analysis_connection(warehouse)
    try:
        scope = report.select(con, runs, experiments)
        if strict:
            _check_settings(report, scope, settings or {})
        scope.variables.update(settings or {})
        for name, value in sorted(scope.variables.items()):
            con.execute(f"SET VARIABLE {name} = ?", [value])
        yield ScopedReport(con, report, scope)
    finally:
        con.close()


def _check_settings(report: ReportDefinition, scope: Scope, settings: Mapping[str, Any]) -> None:
    """Refuse a setting the report's queries never read (a typo would change nothing),
    or one its selector works out from the runs (the queries would disagree)."""
    text = "\n".join(load_queries(report.name).values())
    read = set(re.findall(r"getvariable\('(\w+)'\)", text))
    own = sorted(read - set(scope.variables))
    for key in settings:
        if key in scope.variables:
            raise InputError(
                f"the {report.name} report works out {key} from the runs it selects; "
                "it is not a setting"
            )
        if key not in read:
            raise InputError(
                f"the {report.name} report's charts read no setting {key!r} "
                f"(the settings they read: {', '.join(own) if own else 'none'})"
            )
