"""A trace family from outside kvtrace: an installed distribution names it in the
``kvtrace.families`` entry-point group, and ``kvtrace ingest`` reads its files like a
built-in family's (by their content, or by ``--kind``); a plugin that cannot be loaded
is one sentence that names it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import kvtrace

FAMILY_MODULE = '''
"""Arrival lists of a made-up tool: a ``#example-arrivals`` line, then
``arrival_s,input_tokens,output_tokens`` lines."""

from kvtrace.ingest.family import FileRows

MARK = b"#example-arrivals"


class ExampleFamily:
    name = "example-arrivals"
    reads = "example arrival lists (#example-arrivals)"
    tables = ("workload_requests",)
    reads_only_record_keys = False

    def recognise(self, probe):
        return "csv" if probe.head.startswith(MARK) else None

    def forced_format(self, probe):
        return "csv"

    def run_name(self, probe, fmt, options):
        return options.run_name or probe.path.stem

    def read(self, probe, fmt, sink, options, advance):
        lines = [line for line in probe.path.read_text().splitlines() if line[:1].isdigit()]
        rows = []
        for index, line in enumerate(lines):
            arrival, prompt, output = line.split(",")
            rows.append(
                {"run_id": "", "request_idx": index, "arrival_s": float(arrival),
                 "input_tokens": int(prompt), "output_tokens": int(output)}
            )
        stored = sink.write_rows("workload_requests", rows)
        advance(probe.source.size)
        return FileRows("workload", rows=stored)


FAMILY = ExampleFamily()
'''


def _install(site: Path, module_text: str) -> None:
    """Lay out ``kvtrace_example_family`` in ``site`` as an installed distribution."""
    package = site / "kvtrace_example_family"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(module_text)
    info = site / "kvtrace_example_family-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: kvtrace_example_family\nVersion: 0.1\n"
    )
    (info / "entry_points.txt").write_text(
        "[kvtrace.families]\nexample-arrivals = kvtrace_example_family:FAMILY\n"
    )


def _kvtrace(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``kvtrace ARGS`` in a fresh process that finds the distributions in ``site``."""
    paths = [str(site), str(Path(kvtrace.__file__).parents[1])]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run(
        [sys.executable, "-m", "kvtrace", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def _count(warehouse: Path, sql: str) -> str:
    done = _kvtrace(warehouse.parent, "-w", str(warehouse), "sql", sql, "--format", "csv")
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[-1]


def test_an_installed_family_reads_the_files_it_recognises_and_those_kind_names(tmp_path):
    site = tmp_path / "site"
    _install(site, FAMILY_MODULE)
    warehouse = tmp_path / "wh"
    marked = tmp_path / "arrivals.txt"
    marked.write_text("#example-arrivals\n0.0,100,10\n0.5,200,20\n1.25,300,30\n")
    done = _kvtrace(site, "-w", str(warehouse), "ingest", str(marked))
    assert done.returncode == 0, done.stderr
    assert _count(warehouse, "SELECT sum(input_tokens) FROM workload_requests") == "600"

    unmarked = tmp_path / "forced.txt"
    unmarked.write_text("2.0,40,4\n")
    forced = ("ingest", "--kind", "example-arrivals", str(unmarked))
    done = _kvtrace(site, "-w", str(warehouse), *forced)
    assert done.returncode == 0, done.stderr
    assert _count(warehouse, "SELECT count(*) FROM workload_requests") == "4"
    assert _count(warehouse, "SELECT count(DISTINCT run_id) FROM workload_requests") == "2"


def test_a_plugin_that_cannot_be_imported_is_one_sentence_naming_it(tmp_path):
    site = tmp_path / "site"
    _install(site, "import kvtrace_module_that_is_not_there\n")
    unknown = tmp_path / "other.txt"
    unknown.write_text("#something kvtrace does not read\n")
    done = _kvtrace(site, "-w", str(tmp_path / "wh"), "ingest", str(unknown))
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert (
        "the trace family plugin 'example-arrivals' of kvtrace_example_family "
        "(kvtrace_example_family:FAMILY) cannot be loaded: ModuleNotFoundError: "
        "No module named 'kvtrace_module_that_is_not_there'"
    ) in " ".join(done.stderr.split())


def test_a_broken_plugin_is_not_loaded_while_the_built_in_families_read_the_files(tmp_path):
    site = tmp_path / "site"
    _install(site, "raise RuntimeError('never imported')\n")
    summary = tmp_path / "exp_summary.json"
    summary.write_text('{"requests": 4}')
    done = _kvtrace(site, "-w", str(tmp_path / "wh"), "ingest", str(summary))
    assert done.returncode == 0, done.stderr
