"""Checks of a report's --run / --experiment values that need no warehouse, run before
it opens (this module imports nothing heavy: the CLI calls it before altair loads)."""

from __future__ import annotations

from kvtrace.errors import InputError


def two_sides(runs: list[str], experiments: list[str]) -> None:
    """The compare report's sides: two experiments or two runs, not a mix, or one
    sentence saying what it needs."""
    if not ((len(experiments) == 2 and not runs) or (len(runs) == 2 and not experiments)):
        raise InputError(
            "compare needs two sides: --experiment A --experiment B, or "
            "--run A --run B (DSA or profiler runs: a run id or a run name shared by several "
            "runs)"
        )
