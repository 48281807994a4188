"""kvtrace sql against hostile statements: nothing written, nothing read from outside."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from kvtrace.ingest import ingest
from tests.conftest import local_only, seed_record, write_jsonl


@pytest.fixture
def root(warehouse, tmp_path):
    records = [seed_record(r, layer, 99, [1, 5, 40]) for r in range(3) for layer in range(500)]
    ingest(warehouse, [str(write_jsonl(tmp_path / "trace.jsonl", records))])
    return warehouse.location


def test_explain_analyze_of_a_write_is_refused_and_writes_nothing(root, cli, tmp_path):
    target = tmp_path / "copied.csv"
    for sql in (
        f"EXPLAIN ANALYZE COPY (SELECT 1) TO '{target}'",
        f"EXPLAIN (FORMAT json) COPY (SELECT 1) TO '{target}'",
        "EXPLAIN ANALYZE CREATE TABLE t AS SELECT 1",
    ):
        status, _, err = cli("-w", root, "sql", sql)
        assert status == 1 and "read-only" in err, sql
    assert not target.exists()
    status, out, _ = cli("-w", root, "sql", "EXPLAIN SELECT count(*) FROM dsa_steps")
    assert status == 0 and "physical_plan" in out


@local_only
def test_output_inside_the_warehouse_is_refused_and_errors_name_the_real_path(root, cli, tmp_path):
    inside = f"{root}/_commits/evil.csv"
    status, _, err = cli("-w", root, "sql", "SELECT 1", "-f", "csv", "-o", inside)
    assert status == 1 and "inside the warehouse" in err
    missing = tmp_path / "no-such-folder" / "out.csv"
    status, _, err = cli("-w", root, "sql", "SELECT 1", "-f", "csv", "-o", str(missing))
    assert status == 1 and str(missing) in err and "kvtrace-tmp" not in err


def test_statements_separated_by_semicolons_run_in_turn(root, cli):
    status, out, err = cli("-w", root, "sql", "SELECT 1 AS a; SELECT 2 AS b", "-f", "csv")
    assert status == 0, err
    assert out == "b\n2\n"


def test_no_external_access_reads_the_warehouse_but_no_other_file(root, cli, tmp_path):
    outside = tmp_path / "secret.csv"
    outside.write_text("x\nsecret-7f3a\n")  # (a value no temporary path holds)
    status, out, _ = cli("-w", root, "sql", f"SELECT * FROM read_csv('{outside}')", "-f", "csv")
    assert status == 0 and "secret-7f3a" in out  # allowed without the flag
    status, _, err = cli(
        "-w", root, "--quiet", "sql", "--no-external-access", f"SELECT * FROM read_csv('{outside}')"
    )
    assert status == 1 and "secret-7f3a" not in err
    status, _, err = cli(
        "-w", root, "sql", "--no-external-access", "SET enable_external_access = true; SELECT 1"
    )
    assert status == 1
    status, out, err = cli(
        "-w",
        root,
        "sql",
        "--no-external-access",
        "SELECT count(*) AS n FROM dsa_steps",
        "-f",
        "csv",
    )
    assert status == 0 and out == "n\n1500\n", err


def test_large_results_stream_to_files_and_the_table_is_capped(root, cli, tmp_path):
    status, out, _ = cli("-w", root, "sql", "SELECT request_id, layer_id FROM dsa_steps")
    assert status == 0
    assert out.count("\n") < 1010 and "the first 1,000 rows" in out
    for fmt in ("csv", "json", "parquet"):
        target = tmp_path / f"all.{fmt}"
        status, _, err = cli(
            "-w",
            root,
            "sql",
            "SELECT request_id, selected_pos FROM dsa_steps",
            "-f",
            fmt,
            "-o",
            str(target),
        )
        assert status == 0, err
        if fmt == "csv":
            assert target.read_text().count("\n") == 1501
        elif fmt == "json":
            rows = json.loads(target.read_text())
            assert len(rows) == 1500 and rows[0]["selected_pos"] == [1, 5, 40]
        else:
            assert pq.read_table(target).num_rows == 1500
