"""``kvtrace sql`` reads its SQL from standard input, as duckdb's shell does: with ``-``
(argument or ``--file -``), or with no argument while standard input is a pipe; from a
terminal with no argument it says how to give the SQL."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tests.conftest import run_kvtrace, warehouse_at

AZURE = str(Path(__file__).parent / "data" / "azure_llm_inference_code.csv")
COUNT = "SELECT count(*) AS requests FROM workload_requests"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    root = warehouse_at(tmp_path_factory.mktemp("sql") / "wh")
    assert run_kvtrace("-w", root, "-q", "ingest", AZURE).returncode == 0
    return root


@pytest.mark.parametrize("args", [[], ["-"], ["--file", "-"]])
def test_the_sql_comes_from_a_pipe(warehouse, monkeypatch, args):
    monkeypatch.setattr("sys.stdin", io.StringIO(COUNT + ";\n"))
    result = run_kvtrace("-w", warehouse, "sql", *args, "-f", "json")
    assert result.returncode == 0, result.stderr
    # the Azure code trace has 8,819 requests (one a line after its header)
    assert json.loads(result.stdout) == [{"requests": 8819}]


def test_an_argument_wins_over_a_pipe(warehouse, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("SELECT 'not this'"))
    result = run_kvtrace("-w", warehouse, "sql", "SELECT 7 AS x", "-f", "json")
    assert json.loads(result.stdout) == [{"x": 7}]


@pytest.mark.parametrize("stdin", [Terminal(""), io.StringIO("  \n")])
def test_a_terminal_or_an_empty_pipe_says_how_to_give_the_sql(warehouse, monkeypatch, stdin):
    monkeypatch.setattr("sys.stdin", stdin)
    result = run_kvtrace("-w", warehouse, "sql")
    assert result.returncode == 1
    assert result.stderr.startswith('Error: no SQL given: kvtrace sql "SELECT ..."')
    assert "| kvtrace sql" in result.stderr
