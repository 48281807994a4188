"""Pick the runs a report covers: the ``report_runs`` temporary table its queries join."""

from __future__ import annotations

import duckdb

from kvtrace.errors import InputError
from kvtrace.reports._model import Scope, Selector

MAX_LISTED = 12


def select_runs(
    con: duckdb.DuckDBPyConnection,
    candidates_sql: str,
    *,
    runs: list[str],
    experiments: list[str],
    what: str,
    table: str = "report_runs",
) -> list[str]:
    """Fill ``table`` (run_id, run_name, experiment) with the candidate runs that match.

    ``candidates_sql`` yields (run_id, run_name, experiment).  A run matches a --run value
    by id or name, and an --experiment value by label; with neither, every candidate is
    taken.  Returns the header lines that say what was selected.
    """
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {table} AS
        SELECT DISTINCT run_id, run_name, experiment FROM ({candidates_sql})
        WHERE (len($runs) = 0 OR run_id IN (SELECT run_id FROM runs_named($runs)))
          AND (len($experiments) = 0 OR experiment IN (SELECT unnest($experiments)))
    """,
        {"runs": runs, "experiments": experiments},
    )
    chosen = con.execute(
        f"SELECT run_id, run_name, experiment FROM {table} ORDER BY ALL"
    ).fetchall()
    if not chosen:
        asked = [f"--run {r}" for r in runs] + [f"--experiment {e}" for e in experiments]
        raise InputError(
            f"no {what} in the warehouse match {' '.join(asked) or 'the selection'}"
            if asked
            else f"the warehouse holds no {what}"
        )
    listed = [_described(*row) for row in chosen[:MAX_LISTED]]
    more = len(chosen) - MAX_LISTED
    counted = f"{len(chosen)} {_singular(what) if len(chosen) == 1 else what}"
    return [f"{counted}: " + "; ".join(listed) + (f"; {more} more" if more > 0 else "")]


def _described(run_id: str, name: str | None, experiment: str | None) -> str:
    """A run as the header lists it: its id, then its name and experiment where they are
    given and say something the id and each other do not."""
    said = [
        text
        for text in dict.fromkeys((name, experiment))
        if text and not run_id.startswith(f"{text}-")
    ]
    return f"{run_id} ({', '.join(said)})" if said else run_id


def _singular(what: str) -> str:
    """``what`` (a plural such as "DSA runs") for one: "DSA run"."""
    head, _, last = what.rpartition(" ")
    return f"{head} {last[:-1]}".strip() if last.endswith("s") else what


def runs_in(table: str, what: str) -> Selector:
    """A report's selector: the runs with rows in ``table`` (a view with run_id and
    experiment columns), by run id, run name or experiment."""
    candidates = (
        f"SELECT t.run_id, r.run_name, t.experiment FROM {table} t LEFT JOIN runs r USING (run_id)"
    )

    def select(con: duckdb.DuckDBPyConnection, runs: list[str], experiments: list[str]) -> Scope:
        return Scope(select_runs(con, candidates, runs=runs, experiments=experiments, what=what))

    return select
