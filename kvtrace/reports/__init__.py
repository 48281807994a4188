"""HTML reports over the views: ``kvtrace report NAME`` (see `reports` for the names).

Each report is a module here that defines a `ReportDefinition` (see `model`), with its
queries in ``queries/<name>.sql``.  To add one, write both and list it in `REPORTS`.
"""

from __future__ import annotations

from kvtrace.reports._model import ReportDefinition


def reports() -> dict[str, ReportDefinition]:
    """Every report by name (imported on demand: altair loads only when reporting)."""
    from kvtrace.reports import compare, dsa, eval, pool, serving, timeline, whatif, workload

    return {
        r.name: r
        for r in (
            dsa.REPORT,
            pool.REPORT,
            serving.REPORT,
            compare.REPORT,
            whatif.REPORT,
            eval.REPORT,
            workload.REPORT,
            timeline.REPORT,
        )
    }
