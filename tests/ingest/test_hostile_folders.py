"""Hostile folders: a file name that is not UTF-8, a file or a sub-folder that cannot be
read.  Each is named in one sentence, the rest of the folder is ingested, and the exit
status says when something was skipped."""

from __future__ import annotations

import builtins
import os
import shutil
from pathlib import Path

import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse
from tests.conftest import DATA, run_kvtrace, warehouse_at, write_jsonl
from tests.ingest.family_files import FAMILIES, family_file
from tests.serving.fixtures import request_rows

NOT_UTF8 = b"caf\xe9_metrics.jsonl"  # Latin-1 bytes: no UTF-8 decoder reads them
SHOWN = "caf\\xe9_metrics.jsonl"  # how kvtrace writes that name


def _folder_with(tmp_path: Path, odd_name: bytes | str) -> tuple[Path, Path]:
    """A folder of three traces: a request-metrics file under ``odd_name`` between two
    arrival traces (found before and after it); returns the folder and the odd file."""
    folder = tmp_path / "traces"
    lines = (DATA / "mooncake_conversation_trace.jsonl").read_text().splitlines()
    (folder / "sub").mkdir(parents=True)
    (folder / "a_arrivals.jsonl").write_text("\n".join(lines[:10]) + "\n")
    (folder / "z_arrivals.jsonl").write_text("\n".join(lines[10:30]) + "\n")
    name = os.fsdecode(odd_name)
    odd = write_jsonl(folder / name, request_rows()[:6])
    return folder, odd


def _non_utf8_folder(tmp_path: Path) -> tuple[Path, Path]:
    try:
        return _folder_with(tmp_path, NOT_UTF8)
    except (OSError, UnicodeError):  # a file system that only holds UTF-8 names (macOS)
        pytest.skip("this file system does not hold names that are not UTF-8")


def _count(warehouse, table: str) -> int:
    return connect(warehouse).execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_a_name_that_is_not_utf8_is_ingested_under_its_escaped_name(warehouse, tmp_path):
    folder, odd = _non_utf8_folder(tmp_path)
    report = ingest(warehouse, [str(folder)])
    statuses = {Path(f.path).name: (f.status, f.rows) for f in report.files}
    assert statuses == {
        "a_arrivals.jsonl": ("ingested", 10),
        SHOWN: ("ingested", 6),
        "z_arrivals.jsonl": ("ingested", 20),
    }
    journal = warehouse.snapshot().commits["source_path"].to_pylist()
    assert f"{folder}/{SHOWN}" in journal  # valid UTF-8: the byte written as \xe9
    assert _count(warehouse, "request_metrics") == 6
    run = connect(warehouse).execute("SELECT DISTINCT experiment FROM request_metrics")
    assert run.fetchall() == [("caf\\xe9",)]
    again = ingest(warehouse, [str(odd)])
    assert (again.files[0].status, again.files[0].path) == ("already ingested", f"{folder}/{SHOWN}")


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_reads_a_file_whose_name_and_folder_are_not_utf8(tmp_path, family):
    folder = tmp_path / os.fsdecode(b"run\xe9")
    try:
        made = family_file(folder, family)
        odd = made.rename(made.with_name(os.fsdecode(b"\xff" + os.fsencode(made.name))))
    except (OSError, UnicodeError):
        pytest.skip("this file system does not hold names that are not UTF-8")
    warehouse = Warehouse(warehouse_at(tmp_path / "wh"), create=True)
    first = ingest(warehouse, [str(folder)]).files
    assert [(f.path, f.status, f.family) for f in first] == [
        (f"{tmp_path}/run\\xe9/\\xff{made.name}", "ingested", family)
    ]
    assert first[0].rows > 0
    again = ingest(warehouse, [str(odd)]).files[0]
    assert (again.status, again.run_id) == ("already ingested", first[0].run_id)


def test_the_command_names_a_file_that_is_not_utf8_in_printable_form(tmp_path):
    folder, _ = _non_utf8_folder(tmp_path)
    root = warehouse_at(tmp_path / "wh")
    first = run_kvtrace("-w", root, "ingest", str(folder))
    assert first.returncode == 0, first.stderr
    assert f"{SHOWN}: 6 rows into run caf-xe9-" in first.stdout
    assert "36 rows ingested" in first.stdout
    again = run_kvtrace("-w", root, "ingest", str(folder))
    assert again.returncode == 0, again.stderr
    assert f"{SHOWN}: already ingested (run caf-xe9-" in again.stdout


@pytest.fixture
def unreadable(monkeypatch):
    """Make a file or folder unreadable: ``chmod 000``, and where that binds nobody (the
    superuser) opening or listing it fails as it would for anyone else."""
    denied: set[str] = set()

    def deny(path: Path) -> None:
        path.chmod(0)
        denied.add(str(path))

    if os.geteuid() == 0:
        real_open, real_scandir = builtins.open, os.scandir

        def guarded_open(file, *args, **kwargs):
            if isinstance(file, (str, os.PathLike)) and os.fspath(file) in denied:
                raise PermissionError(13, "Permission denied", os.fspath(file))
            return real_open(file, *args, **kwargs)

        def guarded_scandir(path="."):
            if os.fspath(path) in denied:
                raise PermissionError(13, "Permission denied", os.fspath(path))
            return real_scandir(path)

        monkeypatch.setattr(builtins, "open", guarded_open)
        monkeypatch.setattr(os, "scandir", guarded_scandir)
    yield deny
    for path in denied:
        Path(path).chmod(0o755)


def test_an_unreadable_file_is_named_and_the_rest_ingested(tmp_path, unreadable):
    folder, odd = _folder_with(tmp_path, "secret_metrics.jsonl")
    unreadable(odd)
    root = warehouse_at(tmp_path / "wh")
    result = run_kvtrace("-w", root, "ingest", str(folder))
    assert result.returncode == 1
    assert "secret_metrics.jsonl: cannot be read (Permission denied)" in result.stdout
    assert result.stderr.strip() == (
        "Error: 1 file or folder could not be read and was skipped (secret_metrics.jsonl); "
        "the rest was ingested"
    )
    assert "30 rows ingested" in result.stdout
    assert _count(Warehouse(root), "workload_requests") == 30


def test_an_unreadable_sub_folder_is_named_and_the_rest_ingested(tmp_path, unreadable):
    folder, _ = _folder_with(tmp_path, "exp_metrics.jsonl")
    locked = folder / "sub"
    shutil.copy(DATA / "mooncake_conversation_trace.jsonl", locked / "more_arrivals.jsonl")
    unreadable(locked)
    root = warehouse_at(tmp_path / "wh")
    result = run_kvtrace("-w", root, "ingest", str(folder))
    assert result.returncode == 1
    assert "sub: cannot be read (Permission denied)" in result.stdout
    assert "could not be read and was skipped (sub)" in result.stderr
    assert "36 rows ingested" in result.stdout
    assert _count(Warehouse(root), "request_metrics") == 6
