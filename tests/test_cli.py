"""The command line: one-sentence errors, read-only SQL, formats, help and guide coverage."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.main import get_command

from kvtrace.cli import whole_app
from kvtrace.sql.catalog import documented_objects
from tests.conftest import local_only, run_kvtrace, seed_record, warehouse_at, write_jsonl

README = Path(__file__).parent.parent / "README.md"
app = whole_app()


def kvtrace(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The command line, run in this process (see `tests.conftest.run_kvtrace`)."""
    return run_kvtrace(*args, cwd=cwd)


@pytest.fixture
def loaded(tmp_path, synthetic_trace):
    trace = synthetic_trace("cli", requests=2, steps=2, layers=3, prompt_tokens=400)
    root = warehouse_at(tmp_path / "wh")
    result = kvtrace("-w", str(root), "-q", "ingest", str(trace))
    assert result.returncode == 0, result.stderr
    return root


def test_ingest_reports_rows_and_rejections_and_strict_fails(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [seed_record(0, 0, 9, [1]), "{broken"])
    root = warehouse_at(tmp_path / "wh")
    lenient = kvtrace("-w", root, "-q", "ingest", str(path))
    assert lenient.returncode == 0
    assert "1 rows ingested, 1 line(s) rejected" in lenient.stdout
    other = write_jsonl(tmp_path / "u.jsonl", [seed_record(1, 0, 9, [1]), "{broken"])
    strict = kvtrace("-w", root, "-q", "ingest", "--strict", str(other))
    assert strict.returncode == 1
    assert strict.stderr.strip() == "Error: 1 line(s) were rejected (--strict)"


MOONCAKE = Path(__file__).parent / "data" / "mooncake_conversation_trace.jsonl"
ARRIVALS = "SELECT requests, rate_per_s, gap_cv FROM workload_arrival_summary"


def test_ingest_with_sql_answers_in_one_process_what_two_commands_answer(tmp_path):
    two = warehouse_at(tmp_path / "two")
    kvtrace("-w", two, "-q", "ingest", str(MOONCAKE))
    expected = kvtrace("-w", two, "sql", ARRIVALS, "-f", "json").stdout
    one = warehouse_at(tmp_path / "one")
    result = kvtrace("-w", one, "-q", "ingest", str(MOONCAKE), "--sql", ARRIVALS, "-f", "json")
    assert result.returncode == 0, result.stderr
    # the rows alone (the report went to stderr); gap_cv is a parallel sum of floats,
    # whose last bit depends on how DuckDB's threads split the rows
    (got,), (want,) = json.loads(result.stdout), json.loads(expected)
    assert got == pytest.approx(want, rel=1e-12)
    assert json.loads(result.stdout)[0]["requests"] == 12_031  # the CSV's data rows
    assert "12,031 rows ingested" in result.stderr


def test_ingest_with_sql_reads_the_files_it_just_added(tmp_path):
    root = warehouse_at(tmp_path / "wh")
    first = write_jsonl(tmp_path / "a.jsonl", [seed_record(0, 0, 9, [1, 2])])
    second = write_jsonl(
        tmp_path / "b.jsonl", [seed_record(1, 0, 9, [3]), seed_record(1, 1, 10, [4])]
    )
    count = "SELECT count(*) AS n FROM dsa_steps"
    assert kvtrace("-w", root, "ingest", str(first), "--sql", count, "-f", "csv").stdout == "n\n1\n"
    assert (
        kvtrace("-w", root, "ingest", str(second), "--sql", count, "-f", "csv").stdout == "n\n3\n"
    )
    out = tmp_path / "n.json"
    kvtrace("-w", root, "ingest", str(second), "--sql", count, "-o", str(out))
    assert json.loads(out.read_text()) == [{"n": 3}]  # the same file again adds nothing


@pytest.mark.parametrize(
    "sql, said",
    [("DROP VIEW dsa_steps", "read-only"), ("SELEC 1", "does not parse")],
)
def test_ingest_with_sql_that_cannot_run_reads_nothing(tmp_path, sql, said):
    path = write_jsonl(tmp_path / "t.jsonl", [seed_record(0, 0, 9, [1])])
    result = kvtrace("-w", str(tmp_path / "wh"), "ingest", str(path), "--sql", sql)
    assert result.returncode == 1 and said in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "wh").exists()  # checked before any file was read


@pytest.mark.parametrize(
    "args, message",
    [
        (["ingest", "missing.jsonl"], "Error: missing.jsonl does not exist"),
        (["ingest", "other.jsonl"], "Error: "),
        (["ingest", "--block-size", "x", "other.jsonl"], "Usage:"),
        (["sql", "SELECT 1"], "Error: no kvtrace warehouse at"),
        (["sql"], 'Error: no SQL given: kvtrace sql "SELECT ..."'),
        (["sql", "SELECT 1", "--file", "q.sql"], "Error: give the SQL either as an argument"),
        (["ingest", "other.jsonl", "-f", "csv"], "Error: --format and --output shape the rows"),
    ],
)
def test_errors_are_one_sentence_without_traceback(tmp_path, args, message):
    (tmp_path / "other.jsonl").write_text('{"hello": "world"}\n')
    result = kvtrace("-w", warehouse_at(tmp_path / "wh"), *args, cwd=tmp_path)
    assert result.returncode in (1, 2)
    assert result.stderr.startswith(message)
    if args == ["ingest", "other.jsonl"]:
        assert "other.jsonl is not a trace kvtrace knows" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1 or message == "Usage:"


def test_sql_refuses_statements_that_write(loaded, tmp_path):
    target = tmp_path / "out.csv"
    for statement in (
        f"COPY (SELECT 1) TO '{target}'",
        "CREATE TABLE t AS SELECT 1",
        "SELECT 1; DROP VIEW dsa_steps",
        f"ATTACH '{tmp_path / 'x.db'}'",
    ):
        result = kvtrace("-w", str(loaded), "sql", statement)
        assert result.returncode == 1 and "read-only" in result.stderr, statement
    assert not target.exists()


def test_sql_formats(loaded, tmp_path):
    query = "SELECT layer_id, rows FROM dsa_layer_profile ORDER BY layer_id"
    as_json = json.loads(kvtrace("-w", str(loaded), "sql", query, "-f", "json").stdout)
    assert as_json == [{"layer_id": i, "rows": 4} for i in range(3)]
    as_csv = kvtrace("-w", str(loaded), "sql", query, "--format", "csv").stdout
    assert as_csv.splitlines() == ["layer_id,rows", "0,4", "1,4", "2,4"]
    table = kvtrace("-w", str(loaded), "sql", query).stdout
    assert table.splitlines()[0].split() == ["layer_id", "rows"]
    assert table.rstrip().endswith("(3 rows)")
    wide = "SELECT 1234567 AS n, 2.5e-7::DOUBLE AS f, {'count': 16738::HUGEINT} AS s"
    assert kvtrace("-w", str(loaded), "sql", wide).stdout.splitlines()[2].split("  ") == [
        "1,234,567",
        "0.00000025",
        '{"count": 16738}',
    ]
    out = tmp_path / "r.parquet"
    kvtrace("-w", str(loaded), "sql", query, "-f", "parquet", "-o", str(out))
    assert pq.read_table(out).num_rows == 3
    by_suffix = tmp_path / "by-suffix.parquet"  # no --format: the suffix names it
    kvtrace("-w", str(loaded), "sql", query, "-o", str(by_suffix))
    assert pq.read_table(by_suffix).equals(pq.read_table(out))
    kvtrace("-w", str(loaded), "sql", query, "-o", str(tmp_path / "r.csv"))
    assert (tmp_path / "r.csv").read_text().splitlines() == as_csv.splitlines()
    kvtrace("-w", str(loaded), "sql", query, "-o", str(tmp_path / "r.txt"))
    assert (tmp_path / "r.txt").read_text().rstrip().endswith("(3 rows)")
    sql_file = tmp_path / "q.sql"
    sql_file.write_text(query)
    assert kvtrace("-w", str(loaded), "sql", "--file", str(sql_file), "-f", "csv").stdout == as_csv
    no_file = kvtrace("-w", str(loaded), "sql", "-o", "", query)
    assert (no_file.returncode, no_file.stderr) == (
        1,
        "Error: --output names no file; give one such as rows.csv\n",
    )
    bad = kvtrace("-w", str(loaded), "sql", "SELECT * FROM nope")
    assert bad.returncode == 1 and "kvtrace views" in bad.stderr
    # DuckDB guesses some name for any name; one not near "nope" is no help
    assert "Did you mean" not in bad.stderr
    numbers = "SELECT sum(rows) AS total, avg(rows)::DECIMAL(9, 2) AS mean FROM dsa_layer_profile"
    as_json = json.loads(kvtrace("-w", str(loaded), "sql", numbers, "-f", "json").stdout)
    assert as_json == [{"total": 12, "mean": 4.0}]  # decimals stay numbers
    odd = "SELECT 'nan'::DOUBLE AS x, ['-inf'::DOUBLE, 2.5] AS l, {'a': 'inf'::DOUBLE} AS s"
    text = kvtrace("-w", str(loaded), "sql", odd, "-f", "json").stdout
    assert json.loads(text, parse_constant=pytest.fail) == [  # strict JSON: no NaN
        {"x": None, "l": [None, 2.5], "s": {"a": None}}
    ]


@pytest.mark.parametrize(
    ("query", "said"),
    [
        (
            "SELECT * FROM dsa_layer_profil",
            'Table with name dsa_layer_profil does not exist! Did you mean "dsa_layer_profile"?',
        ),
        (
            "SELECT layer FROM dsa_layer_profile",
            'Referenced column "layer" not found in FROM clause! Candidate bindings: "layer_id"',
        ),
        ("SELECT * FROM dsa_blocks", "dsa_blocks is a macro: call it with its arguments"),
    ],
)
def test_sql_errors_keep_duckdbs_hint_in_one_sentence(loaded, query, said):
    bad = kvtrace("-w", str(loaded), "sql", query)
    assert bad.returncode == 1 and said in bad.stderr
    assert len(bad.stderr.splitlines()) == 1


def test_summary_writes_the_tracers_summary_json(loaded, tmp_path):
    out = tmp_path / "summary.json"
    result = kvtrace("-w", str(loaded), "summary", "--run", "cli", "--output", str(out))
    assert result.returncode == 0, result.stderr
    summary = json.loads(out.read_text())
    for field in (
        "unique_blocks",
        "tokens_per_touched_block",
        "offsets",
        "touched_block_ratio",
        "prefix_intersection_ratio",
    ):
        assert set(summary[field]) - {"mean_per_row"} == {
            "count",
            "min",
            "p50",
            "p95",
            "max",
            "mean",
        }
    assert "mean_per_row" in summary["tokens_per_touched_block"]
    assert summary["config"]["kv_block_size_tokens"] == 64
    assert summary["unique_blocks"]["count"] == 12
    assert list(summary["prefix_hot_blocks"]) == ["0", "1"]  # a miss has its key region
    missing = kvtrace("-w", str(loaded), "summary", "--run", "nope")
    assert missing.returncode == 1 and "no DSA run 'nope'" in missing.stderr


@local_only  # a plain duckdb shell reads an object store only through httpfs
def test_shell_init_gives_a_plain_duckdb_the_same_views(loaded, tmp_path):
    import duckdb

    script = kvtrace("-w", str(loaded), "shell-init").stdout
    con = duckdb.connect()
    con.execute(script)
    assert con.execute("SELECT count(*) FROM dsa_blocks(16)").fetchone() == (12,)


def test_collect_pool_polls_and_reports(tmp_path):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = kvtrace(
        "-w",
        warehouse_at(tmp_path / "wh"),
        "collect",
        "pool",
        "--endpoint",
        f"decode-0=http://127.0.0.1:{port}/server_info",
        "--interval",
        "0.2",
        "--duration",
        "0.5",
        "--run-name",
        "cli-poll",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("polled 1 worker(s): ")
    refused = kvtrace(
        "-w",
        warehouse_at(tmp_path / "wh"),
        "collect",
        "pool",
        "--endpoint",
        "http://127.0.0.1:1/x",
        "--interval",
        "1",
        "--timeout",
        "2",
    )
    assert refused.returncode == 1 and "below the interval" in refused.stderr


def test_collect_dsa_traces_a_small_ruler_run(tmp_path):
    result = kvtrace(
        "-w",
        warehouse_at(tmp_path / "wh"),
        "collect",
        "dsa",
        "--limit",
        "2",
        "--ruler-length",
        "600",
        "--max-new-tokens",
        "3",
        "--layers",
        "2",
        "--topk",
        "64",
        "--block-size",
        "16",
        "--run-name",
        "cli-dsa",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("2 request(s) traced, 0 skipped, 6 tokens")
    rows = kvtrace(
        "-w",
        warehouse_at(tmp_path / "wh"),
        "sql",
        "SELECT count(*) AS n, max(len(selected_pos)) AS k FROM dsa_steps",
        "-f",
        "csv",
    ).stdout
    assert rows.splitlines()[1] == "8,64"  # 2 requests x 2 decode steps x 2 layers
    bad = kvtrace("-w", warehouse_at(tmp_path / "wh"), "collect", "dsa", "--dataset", "mmlu")
    assert bad.returncode == 2 and "'mmlu' is not one of 'ruler', 'sharegpt'" in bad.stderr
    nowhere = kvtrace("-w", warehouse_at(tmp_path / "wh"), "collect", "dsa", "--device", "tpu:x")
    assert nowhere.returncode == 1
    assert (
        nowhere.stderr.strip()
        == "Error: --device 'tpu:x' is not a torch device (cpu, cuda, cuda:1, mps)"
    )
    chat = kvtrace(
        "-w",
        warehouse_at(tmp_path / "wh"),
        "collect",
        "dsa",
        "--dataset",
        "sharegpt",
        "--data-file",
        "tests/data/sharegpt_format_dummy_conversation.json",
        "--turn-mode",
        "per_user_turn",
        "--limit",
        "3",
        "--max-new-tokens",
        "2",
        "--layers",
        "1",
        "--topk",
        "32",
        "--run-name",
        "cli-chat",
        cwd=Path(__file__).parent.parent,
    )
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout.startswith("3 request(s) traced")
    variant = (
        kvtrace(
            "-w",
            warehouse_at(tmp_path / "wh"),
            "sql",
            "SELECT dataset_variant FROM runs WHERE run_name = 'cli-chat'",
            "-f",
            "csv",
        )
        .stdout.splitlines()[1]
        .strip('"')
    )
    assert variant.startswith("sharegpt_format_dummy_conversation.json (sha256 ")


def test_collecting_without_torch_says_how_to_install_it(tmp_path):
    script = (
        "import sys; sys.modules['torch'] = None; from kvtrace.cli import main; "
        f"sys.argv = ['kvtrace', '-w', {str(tmp_path / 'wh')!r}, 'demo']; main()"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr == (
        "Error: collecting DSA traces needs torch; install it with pip install 'kvtrace[collect]'\n"
    )


def test_views_lists_documented_objects_one_a_line_filtered_by_name_or_family():
    from kvtrace.sql.catalog import documented_objects

    def listed(*args: str) -> list[str]:
        lines = kvtrace("views", *args).stdout.splitlines()
        return [line.split("  ")[0].strip() for line in lines]

    public = [obj for obj in documented_objects() if obj.public]
    assert listed() == [obj.signature for obj in public]
    assert any(
        line.startswith("dsa_blocks(bs)") and " macro " in line
        for line in kvtrace("views").stdout.splitlines()
    )
    assert listed("timeline") == [
        obj.signature for obj in public if "timeline" in obj.name or "timeline" in obj.file
    ]
    assert listed("*_summary") == [
        obj.signature
        for obj in public
        if obj.name.endswith("_summary") or obj.file.removesuffix(".sql").endswith("_summary")
    ]
    detail = kvtrace("views", "dsa_summary", "--columns").stdout
    assert "touched_block_ratio" in detail
    missing = kvtrace("views", "no_such_thing")
    assert missing.returncode == 1 and "no view or macro matches" in missing.stderr


def test_views_ends_a_description_at_its_first_sentence_not_at_an_abbreviation():
    # timeline_counter_thrash's header reads "... naming the block in the labels (e.g.
    # {"layer": 3, "block": 17}), gives per rank ... within window_us (default a
    # second)." and serving_warm_cache's "... between runs, e.g. vLLM's POST
    # /reset_prefix_cache ...": one sentence each, which "e.g. " must not cut short.
    lines = kvtrace("views", "thrash").stdout.splitlines()
    (line,) = [line for line in lines if line.startswith("timeline_counter_thrash(")]
    assert line.endswith("again within window_us (default a second).")
    every_line = kvtrace("views").stdout.splitlines()
    assert not any(line.rstrip().endswith(("e.g.", "i.e.")) for line in every_line)


def test_every_command_has_help_with_an_example_and_a_guide_that_shows_it():
    guides = "\n".join(
        p.read_text() for p in [README, *(README.parent / "docs" / "guides").glob("*.md")]
    )
    group = get_command(app)
    for name, command in group.commands.items():
        assert command.help and "Example: kvtrace" in command.help, name
        assert re.search(rf"kvtrace (\S+ )*{re.escape(name)}\b", guides), name


def test_importing_the_cli_loads_no_heavy_module():
    code = (
        "import sys, kvtrace, kvtrace.cli; "
        "print(sorted(m for m in ('duckdb', 'pyarrow', 'numpy', 'torch', 'numba', "
        "'polars', 'altair') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_version_alone_prints_the_version(cli):
    from kvtrace import __version__

    for args in (["--version"], ["-w", "elsewhere", "--version"]):
        status, out, _ = cli(*args)
        assert (status, out.strip()) == (0, f"kvtrace {__version__}")


def test_a_folder_of_several_families_ends_with_a_count_per_family(cli, tmp_path):
    import gzip
    import shutil

    from tests.conftest import DATA

    folder = tmp_path / "mixed"
    folder.mkdir()
    names = ("azure_llm_inference_code.csv", "mooncake_conversation_trace.jsonl")
    for name in (*names, "kineto_sampled_rank0.json.gz"):
        shutil.copy(DATA / name, folder)
    csv_rows = len((DATA / names[0]).read_text().splitlines()) - 1  # less the header
    jsonl_rows = len((DATA / names[1]).read_text().splitlines())
    trace = json.loads(gzip.decompress((DATA / "kineto_sampled_rank0.json.gz").read_bytes()))
    events = sum(1 for e in trace["traceEvents"] if e.get("ph") == "X")
    status, out, _ = cli("-q", "-w", warehouse_at(tmp_path / "wh"), "ingest", str(folder))
    assert status == 0
    assert (
        f"by family: workload 2 files ({csv_rows + jsonl_rows:,} rows), "
        f"timeline 1 file ({events:,} rows)"
    ) in out


def test_help_names_what_to_give_not_a_python_type(cli):
    """Every command's help shows metavars a person reads (PATH..., N, VERSION)."""
    typed = re.compile(r"<(?:str|int|float|path|text|list)|\{[a-z_]+\}")

    def paths(command, prefix=()):
        yield prefix
        for name, sub in getattr(command, "commands", {}).items():
            yield from paths(sub, (*prefix, name))

    seen = 0
    for path in paths(get_command(app)):
        status, out, _ = cli(*path, "--help")
        assert status == 0, path
        assert not typed.search(out), (path, typed.search(out))
        seen += 1
    assert seen > 15
    _, out, _ = cli("sql", "--help")
    assert "--as-of VERSION" in out and "--file PATH" in out
    # --as-of names the column that holds the versions it takes
    assert "warehouse_version" in out and "warehouse_commits" in out
    commits = next(o for o in documented_objects() if o.name == "warehouse_commits")
    assert "warehouse_version" in commits.columns


@pytest.mark.parametrize(
    ("args", "built"),
    [
        (["-w", "wh", "-q", "sql", "SELECT 1"], ["sql"]),
        (["--warehouse", "sql", "ingest", "x"], ["ingest"]),  # a warehouse named sql
        (["prefix-curve", "--run", "r"], ["prefix-curve"]),
        (["collect", "pool", "--help"], ["collect"]),
        (["--help"], None),
        (["--version"], None),
        (["no-such-command"], None),
    ],
)
def test_a_command_line_builds_only_the_command_it_names(args, built):
    from kvtrace.cli import _app_for

    command = get_command(_app_for(args))
    assert sorted(command.commands) == (built or sorted(get_command(app).commands))
