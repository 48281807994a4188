"""The registry of reports: every report module is listed once, under its own name, with
its queries; naming the reports loads nothing heavy."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources
from pathlib import Path

import kvtrace.reports
from kvtrace.reports import REPORTS, report_names, reports

NOT_REPORTS = {"__init__", "render", "scoped"}  # the package, the renderer and the section runner


def test_every_report_module_is_listed_once_under_its_own_name():
    modules = {
        path.stem
        for path in Path(kvtrace.reports.__file__).parent.glob("*.py")
        if not path.stem.startswith("_") and path.stem not in NOT_REPORTS
    }
    assert sorted(report_names()) == sorted(modules)
    assert len(set(report_names())) == len(REPORTS)
    assert {name: definition.name for name, definition in reports().items()} == {
        name: name for name in report_names()
    }


def test_every_report_has_its_queries():
    queries = resources.files("kvtrace.reports").joinpath("queries")
    assert all(queries.joinpath(f"{name}.sql").is_file() for name in report_names())


def test_naming_the_reports_loads_neither_duckdb_nor_arrow():
    code = (
        "import sys; from kvtrace.reports import report_help; report_help(); "
        "print(sorted({'duckdb', 'pyarrow', 'altair'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "[]", done.stderr
