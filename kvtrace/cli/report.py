"""``kvtrace report``: render a self-contained HTML report."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kvtrace.cli._app import _open, app, out
from kvtrace.cli._options import AsOfOption, one_of
from kvtrace.errors import KvtraceError
from kvtrace.reports import report_help, report_names

if TYPE_CHECKING:  # the heavy modules load inside the commands that need them
    from kvtrace.warehouse import Warehouse


@app.command("report")
def report_command(
    name: Annotated[str, typer.Argument(callback=one_of(report_names), help=report_help())],
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write.")],
    run: Annotated[
        list[str] | None,
        typer.Option(
            help="Run id or run name to cover (repeatable) [default: every run of the kind]; "
            "compare: the two sides; eval: the first two are diffed."
        ),
    ] = None,
    experiment: Annotated[
        list[str] | None,
        typer.Option(help="Experiment label to cover (repeatable); compare: the two sides."),
    ] = None,
    slo: Annotated[
        list[str] | None,
        typer.Option(
            metavar="METRIC=MS",
            help="serving: a service-level objective, ttft, tpot or e2el in milliseconds "
            "(repeatable), drawn as a line and counted in the goodput.",
        ),
    ] = None,
    as_of: AsOfOption = None,
) -> None:
    """Render a self-contained HTML report (charts and tables, with their SQL).

    The report names the warehouse version it was made from: '--as-of' that version
    makes the same report again.

    Example: kvtrace report dsa --run demo-ruler-dsa-ref --output dsa.html
    """
    _check_arguments(name, run or [], experiment or [])  # before the warehouse opens
    _write_report(
        _open(as_of=as_of),
        ReportSpec(
            name,
            output,
            runs=tuple(run or []),
            experiments=tuple(experiment or []),
            slos=_slos(name, slo or []),
        ),
    )
    out.say(f"wrote {output}")


def _check_arguments(name: str, runs: list[str], experiments: list[str]) -> None:
    """The report's own check of its --run / --experiment values (compare: two sides)."""
    from kvtrace.reports import REPORTS

    check = next(listed for listed in REPORTS if listed.name == name).check_arguments
    if check is not None:
        check(runs, experiments)


SLO_METRICS = ("ttft", "tpot", "e2el")


def _slos(report: str, given: list[str]) -> tuple[tuple[str, float], ...]:
    """``--slo METRIC=MS`` values by metric; one sentence for a malformed one."""
    if given and report != "serving":
        raise KvtraceError("--slo applies to the serving report only")
    slos: dict[str, float] = {}
    for text in given:
        metric, _, value = text.partition("=")
        try:
            milliseconds = float(value)
        except ValueError:
            milliseconds = -1.0
        if metric not in SLO_METRICS or not milliseconds > 0:
            raise KvtraceError(
                f"expected --slo METRIC=MS with METRIC one of {', '.join(SLO_METRICS)} and MS "
                f"a positive number of milliseconds, got {text!r}"
            )
        slos[metric] = milliseconds
    return tuple(slos.items())


@dataclass(frozen=True)
class ReportSpec:
    """A report to render: which, to what file, over which runs and experiments, with
    which service-level objectives (metric, milliseconds)."""

    name: str
    output: Path
    runs: tuple[str, ...] = ()
    experiments: tuple[str, ...] = ()
    slos: tuple[tuple[str, float], ...] = ()


def _write_report(warehouse: Warehouse, spec: ReportSpec) -> None:
    """Render the report ``spec`` names to its file; its command line is the one that
    makes it again (the warehouse version pinned)."""
    name, output = spec.name, spec.output
    import shlex

    from kvtrace.reports import reports
    from kvtrace.reports.render import render_report

    known = reports()
    if name not in known:
        raise KvtraceError(f"expected {', '.join(known)} for the report, got {name!r}")
    selection = [arg for run in spec.runs for arg in ("--run", run)]
    selection += [arg for label in spec.experiments for arg in ("--experiment", label)]
    for metric, milliseconds in spec.slos:
        selection += ["--slo", f"{metric}={milliseconds:g}"]
    command_line = shlex.join(
        [
            "kvtrace",
            "-w",
            warehouse.location,
            "report",
            name,
            *selection,
            "--as-of",
            str(warehouse.version),
            "--output",
            output.name,
        ]
    )
    html = render_report(
        warehouse,
        known[name],
        runs=list(spec.runs),
        experiments=list(spec.experiments),
        command_line=command_line,
        settings={f"slo_{metric}_ms": ms for metric, ms in spec.slos},
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    from kvtrace.sql.query import write_output

    write_output(html.encode(), output)
