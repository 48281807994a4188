"""Hostile AIPerf and GenAI-Perf summary exports, built from the tools' files: a value out
of range is one sentence naming the file and the value, and an export that is damaged is
said to be one (tests/data/workload)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtrace import connect
from tests.conftest import DATA

AIPERF = DATA / "workload" / "upstream" / "aiperf-run1" / "profile_export_aiperf.json"
GENAI_PERF = DATA / "workload" / "genai-perf-example-concurrency4"
GENAI_PERF = GENAI_PERF / "profile_export_genai_perf.json"


def _export(tmp_path: Path, source: Path, content: bytes, folder: str = "run") -> Path:
    """``content`` under the export's own name, in a folder of its own."""
    path = tmp_path / folder / source.name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def _with(source: Path, change) -> bytes:
    document = json.loads(source.read_text())
    change(document.get("records", document))
    return json.dumps(document).encode()


def _ingest_fails(cli, warehouse, path: Path) -> str:
    status, _, err = cli("-w", warehouse.location, "ingest", str(path))
    assert status == 1
    assert err.startswith("Error: ") and "Traceback" not in err
    assert "report it" not in err and "unexpectedly" not in err, err
    assert connect(warehouse).execute("SELECT count(*) FROM benchmark_summaries").fetchone() == (0,)
    return " ".join(err.split())


def _set(metric: str, statistic: str, value: object):
    return lambda metrics: metrics[metric].__setitem__(statistic, value)


def _settings(**values: object):
    return lambda metrics: metrics.setdefault("input_config", {}).update(values)


@pytest.mark.parametrize(
    ("source", "change", "said"),
    [
        (GENAI_PERF, _set("request_throughput", "avg", 1e400), "request_throughput.avg"),
        (GENAI_PERF, _set("request_latency", "avg", 1e300), "request_latency.avg"),
        (GENAI_PERF, _set("time_to_first_token", "p99", -5.0), "time_to_first_token.p99"),
        (AIPERF, _set("request_count", "avg", 1e300), "request_count.avg"),
        (AIPERF, _set("benchmark_duration", "avg", 1e400), "benchmark_duration.avg"),
        (AIPERF, _set("ttft", "std", "fast"), "ttft.std"),
        (GENAI_PERF, _settings(concurrency=10**30), "input_config.concurrency is out of range"),
        (GENAI_PERF, _settings(request_rate=-1.0), "input_config.request_rate must be at least 0"),
    ],
)
def test_an_export_value_out_of_range_is_one_sentence_naming_file_and_value(
    cli, warehouse, tmp_path, source, change, said
):
    text = _with(source, change).replace(b"Infinity", b"1e400")
    path = _export(tmp_path, source, text)
    err = _ingest_fails(cli, warehouse, path)
    assert f"{path}: {said}" in err, err


@pytest.mark.parametrize(("source", "tool"), [(AIPERF, "an AIPerf"), (GENAI_PERF, "a GenAI-Perf")])
@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda text: text[: len(text) // 2], "not valid JSON"),
        (lambda text: text + b"\n}garbage", "not valid JSON"),
        (lambda text: b"[" + text + b"]", "holds no JSON object"),
        (lambda text: b'{"records": {}}', "holds none of the export's metrics"),
    ],
)
@pytest.mark.parametrize("named", [True, False])
def test_a_damaged_export_is_said_to_be_damaged_not_an_unknown_file(
    cli, warehouse, tmp_path, source, tool, damage, reason, named
):
    path = _export(tmp_path, source, damage(source.read_bytes()))
    err = _ingest_fails(cli, warehouse, path if named else path.parent)
    assert f"{path} looks like {tool} export but is damaged: {reason}" in err, err


def test_a_csv_export_named_on_the_command_line_points_to_the_json_one(cli, warehouse, tmp_path):
    path = tmp_path / "run" / "profile_export_genai_perf.csv"
    path.parent.mkdir()
    path.write_text("Metric,avg,min,max\nTime To First Token (ms),189.78,3.91,7")  # cut short
    err = _ingest_fails(cli, warehouse, path)
    assert (
        f"{path} is GenAI-Perf's CSV export, which kvtrace does not read: "
        "ingest profile_export_genai_perf.json, written beside it" in err
    ), err
