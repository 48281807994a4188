"""The wheel carries every file kvtrace reads at run time: each file of the package that is
not Python source (SQL, vendored JavaScript, samples, export queries) matches a
package-data pattern of pyproject.toml. CI builds the wheel and runs the demo from it
(.ci/run); this catches a new data folder left out of the patterns in a second."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

tomllib = pytest.importorskip("tomllib")  # Python 3.11's


def _package_data_patterns() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return config["tool"]["setuptools"]["package-data"]["kvtrace"]


def _unpackaged(files: list[str], patterns: list[str]) -> list[str]:
    """The files (relative to the package) that no pattern takes into the wheel."""
    return [f for f in files if not any(fnmatch.fnmatch(f, p) for p in patterns)]


def test_every_data_file_of_the_package_goes_into_the_wheel():
    package = ROOT / "kvtrace"
    data = sorted(
        path.relative_to(package).as_posix()
        for path in package.rglob("*")
        if path.is_file() and path.suffix not in {".py", ".pyc"} and "__pycache__" not in path.parts
    )
    # the kinds the issue named, so an empty scan cannot pass
    assert {"sql/queries/dsa_summary.sql", "reports/vendor/vega.min.js", "py.typed"} <= set(data)
    assert any(name.startswith("samples/") for name in data)
    assert any(name.startswith("export/queries/") for name in data)
    assert _unpackaged(data, _package_data_patterns()) == []


def test_a_file_outside_the_patterns_is_found():
    patterns = ["sql/queries/*.sql", "samples/*"]
    found = _unpackaged(["sql/queries/a.sql", "samples/x.jsonl", "charts/theme.json"], patterns)
    assert found == ["charts/theme.json"]
