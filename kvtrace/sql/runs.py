"""Runs by id or name: what a ``--run`` value stands for (the ``runs_named`` macro)."""

from __future__ import annotations

from collections.abc import Sequence

import duckdb

from kvtrace.errors import InputError

LISTS_RUNS = "'kvtrace sql \"SELECT run_id, run_name FROM runs\"' lists the runs"


def run_ids(
    con: duckdb.DuckDBPyConnection,
    selectors: Sequence[str],
    *,
    having: str | None = None,
    what: str = "rows",
) -> list[str]:
    """The ids of the runs ``selectors`` (run ids or names) stand for, in the order
    given, each once; only runs with rows in the table or view ``having`` when named.

    A selector that stands for no such run is one sentence naming it (and ``what`` the
    run lacks, when ``having`` is named).
    """
    where = f"WHERE run_id IN (SELECT run_id FROM {having})" if having else ""
    found = con.execute(
        f"SELECT selector, run_id FROM runs_named($selectors) {where} "
        "ORDER BY list_position($selectors, selector), run_id",
        {"selectors": list(selectors)},
    ).fetchall()
    matched = {selector for selector, _ in found}
    for selector in selectors:
        if selector not in matched:
            missing = f"{what} for run" if having else "run"
            raise InputError(f"no {missing} {selector!r}; {LISTS_RUNS}")
    return list(dict.fromkeys(run_id for _, run_id in found))
