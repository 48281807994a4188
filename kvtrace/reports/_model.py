"""What a report is made of: sections, each a documented query shown as a chart or table.

A report module defines a `ReportDefinition`: its sections, the ``.sql`` file their
queries live in, and how it picks the runs it covers (the ``report_runs`` table every
query joins).  Queries sit in ``queries/<report>.sql``, each under a header

    -- @query name
    -- What the query answers, its columns and their units.
    SELECT ...

and may read the report's settings with ``getvariable('name')``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa

from kvtrace.sql.named_queries import named_queries

ChartBuilder = Callable[[pa.Table], Any]  # rows -> an altair chart


@dataclass(frozen=True)
class Section:
    """One figure (``chart`` given) or table of a report."""

    query: str
    title: str
    caption: str = ""
    chart: ChartBuilder | None = None
    empty: str = "Nothing to show: the query returned no rows."
    max_rows: int = 200
    warning: Callable[[pa.Table], str] | None = None  # a caveat the rows call for
    blank: Callable[[pa.Table], str] | None = None  # why rows show nothing, or ""

    def nothing_to_show(self, rows: pa.Table) -> str:
        """Why ``rows`` show nothing (the ``empty`` line, or what ``blank`` says), or ""."""
        if not rows.num_rows:
            return self.empty
        return self.blank(rows) if self.blank else ""


@dataclass(frozen=True)
class Scope:
    """The runs a report covers and the settings its queries read."""

    lines: list[str]  # shown in the report header: what was selected, how
    variables: dict[str, Any] = field(default_factory=dict)
    warning: str = ""  # a caveat about the whole selection, shown under the header


Selector = Callable[[duckdb.DuckDBPyConnection, list[str], list[str]], Scope]


@dataclass(frozen=True)
class ReportDefinition:
    """A report: ``select`` fills the ``report_runs`` table from the user's --run and
    --experiment values (raising InputError when nothing matches), then every section's
    query runs."""

    name: str
    title: str
    summary: str
    select: Selector
    sections: tuple[Section, ...]


def load_queries(report: str) -> dict[str, str]:
    """The named queries of ``queries/<report>.sql``, each with its comment header."""
    return named_queries("kvtrace.reports", report)
