"""The analysis functions' registry is the one declaration: the shell stand-ins in
udf_fallback.sql are generated from it, and a connection installs exactly its entries."""

import duckdb
import pytest

from kvtrace.analysis.function_specs import (
    FUNCTIONS,
    fallback_file,
    fallback_sql,
    reads,
    with_fallback,
)
from kvtrace.analysis.functions import register


def test_udf_fallback_holds_what_the_registry_generates():
    text = fallback_file().read_text()
    assert fallback_sql().rstrip("\n") in text
    assert with_fallback(text) == text, "run: python -m kvtrace.analysis.function_specs"


def test_every_function_reads_library_files_that_exist():
    queries = fallback_file().parent
    assert set(reads()) == {function.name for function in FUNCTIONS}
    for files in reads().values():
        assert all((queries / name).is_file() for name in files)


def test_a_stand_in_takes_the_same_arguments_and_names_its_macro():
    shell = duckdb.connect()
    shell.execute(fallback_sql())
    python = duckdb.connect()
    register(python)
    for function in FUNCTIONS:
        registered = python.execute(
            "SELECT parameters, return_type FROM duckdb_functions() WHERE function_name = $n",
            {"n": function.name},
        ).fetchall()[0]
        assert len(registered[0]) == len(function.arguments)
        nulls = ", ".join(["NULL"] * len(function.arguments))
        with pytest.raises(duckdb.Error, match=f"{function.macro} {function.does} in Python"):
            shell.sql(f"SELECT {function.name}({nulls})").fetchall()
        stand_in = shell.execute(f"DESCRIBE SELECT {function.name}({nulls}) AS r").fetchall()[0]
        assert stand_in[1] == registered[1]
