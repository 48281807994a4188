"""HTML reports over the views: ``kvtrace report NAME``, and the registry of reports.

Each report is a module here named after it that defines its `ReportDefinition` as
``REPORT`` (see `_model`), with its queries in ``queries/<name>.sql``.  To add one, write
both and give it one line in `REPORTS`: the report command's choices and help derive
from it.  This module imports nothing heavy (the CLI names the reports from it); a
report's module, with DuckDB and altair, loads when it is asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING

from kvtrace.reports._arguments import two_sides

if TYPE_CHECKING:
    from kvtrace.reports._model import ReportDefinition


@dataclass(frozen=True)
class ListedReport:
    """One report of the registry: its name (that of its module and of its queries'
    file) and, in a phrase, what it reads."""

    name: str
    reads: str
    # Checks its --run / --experiment values before the warehouse opens (InputError)
    check_arguments: Callable[[list[str], list[str]], None] | None = None

    @property
    def module(self) -> str:
        """The module that defines its ``REPORT`` (sections, charts, run selection)."""
        return f"kvtrace.reports.{self.name}"


REPORTS: tuple[ListedReport, ...] = (
    ListedReport("dsa", "DSA top-k traces"),
    ListedReport("pool", "KV pool snapshots"),
    ListedReport("serving", "request metrics and serving benchmarks"),
    ListedReport("compare", "two experiments or two run selections", two_sides),
    ListedReport("whatif", "DSA top-k traces replayed through simulated KV caches"),
    ListedReport("eval", "scored RULER predictions"),
    ListedReport("workload", "arrival traces and the timings of their benchmarks"),
    ListedReport("timeline", "Kineto profiler traces"),
)


def report_names() -> tuple[str, ...]:
    """The names ``kvtrace report`` takes."""
    return tuple(listed.name for listed in REPORTS)


def report_help() -> str:
    """The help of ``kvtrace report``'s NAME argument."""
    return "The report: " + "; ".join(f"{item.name} ({item.reads})" for item in REPORTS) + "."


def reports() -> dict[str, ReportDefinition]:
    """Every report by name (imported on demand: altair loads only when reporting)."""
    return {listed.name: _definition(listed) for listed in REPORTS}


def _definition(listed: ListedReport) -> ReportDefinition:
    """The `ReportDefinition` of a listed report, its module imported."""
    definition: ReportDefinition = import_module(listed.module).REPORT
    return definition


__all__ = ["REPORTS", "ListedReport", "report_help", "report_names", "reports"]
