"""Layout safety: partition values, hostile names, a missing warehouse."""

from __future__ import annotations

import pytest

from kvtrace import connect
from kvtrace.errors import WarehouseError
from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse
from kvtrace.warehouse._storage import partition_value
from tests.conftest import local_only, seed_record, write_jsonl


@pytest.mark.parametrize(
    "hostile",
    [
        "../../escape",
        "/etc/passwd",
        "a/../../b",
        "..",
        "<script>alert(1)</script>",
        "tab\there",
        "new\nline",
        ".hidden",
        "",
    ],
)
def test_partition_values_never_leave_their_folder(hostile):
    value = partition_value(hostile)
    assert "/" not in value and "\\" not in value and not value.startswith(".")
    assert all(c.isalnum() or c in "._-~" for c in value)


def test_distinct_hostile_names_stay_distinct():
    assert partition_value("a/b") != partition_value("a_b")


@local_only
def test_a_hostile_dataset_name_is_stored_verbatim_inside_the_warehouse(warehouse, tmp_path):
    name = "../../../outside<script>alert('x')</script>"
    path = write_jsonl(tmp_path / "t.jsonl", [seed_record(0, 0, 9, [1, 2])])
    ingest(warehouse, [str(path)], dataset=name)
    written = [p for p in tmp_path.rglob("*.parquet") if "_schema" not in p.parts]
    assert written and all(warehouse.root in p.parents for p in written)
    con = connect(warehouse)
    assert con.execute("SELECT DISTINCT dataset FROM dsa_steps").fetchall() == [(name,)]


def test_opening_a_missing_warehouse_says_how_to_create_one(tmp_path):
    with pytest.raises(WarehouseError, match="kvtrace ingest"):
        Warehouse(tmp_path / "nowhere")


def test_a_folder_that_is_not_a_warehouse_is_not_taken_over(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(WarehouseError, match="not a kvtrace warehouse"):
        Warehouse(tmp_path, create=True)


def test_processes_creating_one_warehouse_at_once_all_succeed(tmp_path):
    import subprocess
    import sys
    import time

    script = (
        "import sys, time\n"
        "from kvtrace.warehouse import Warehouse\n"
        "time.sleep(max(0.0, float(sys.argv[2]) - time.time()))\n"
        "Warehouse(sys.argv[1], create=True)\n"
    )
    for attempt in range(3):
        root = tmp_path / f"wh{attempt}"
        start = time.time() + 1.2
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script, str(root), str(start)],
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        failures = [p.stderr.read() for p in procs if p.wait() != 0]
        assert failures == [], failures
    with pytest.raises(WarehouseError, match=r"holds notes\.txt"):
        (tmp_path / "foreign").mkdir()
        (tmp_path / "foreign" / "notes.txt").write_text("mine")
        Warehouse(tmp_path / "foreign", create=True)


def test_the_table_names_known_without_arrow_are_those_of_the_schemas():
    from kvtrace.warehouse.schema import TABLE_NAMES
    from kvtrace.warehouse.schema.tables import TABLES

    assert tuple(TABLES) == TABLE_NAMES
    assert all(name == spec.name for name, spec in TABLES.items())
