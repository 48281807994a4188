"""Files the benchmark tools wrote themselves (tests/data/workload/upstream/, sources in its
README): kvtrace shows the numbers each tool printed into its file, and its own
computation from the same file's per-request records gives the tool's numbers."""

from __future__ import annotations

import gzip
import json
import math

import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.conftest import DATA
from tests.serving.vllm_metrics import calculate_metrics, disagreements, outcomes_of

UPSTREAM = DATA / "workload" / "upstream"
VLLM = UPSTREAM / "vllm_llama-3.3-70b_tp8_sharegpt_qps_inf.json.gz"
SGLANG = UPSTREAM / "sglang_llama_3_3_70b_online_output.jsonl"
AIPERF = UPSTREAM / "aiperf-run1"
STATISTICS = {"mean": "avg", "median": "p50", "std": "std", "p90": "p90", "p99": "p99"}


def _rows(warehouse, where: str) -> list[dict]:
    with connect(warehouse) as con:
        return (
            con.sql(f"FROM serving_benchmark WHERE {where} ORDER BY load_level")
            .to_arrow_table()
            .to_pylist()
        )


def test_a_vllm_benchmark_serving_result(warehouse, tmp_path):
    document = json.loads(gzip.decompress(VLLM.read_bytes()))
    lists = {k: v for k, v in document.items() if not k.endswith("_ms")}  # the statistics left out
    (tmp_path / "lists.json").write_text(json.dumps(lists))
    ingest(warehouse, [str(VLLM), str(tmp_path / "lists.json")])
    (shown,) = _rows(warehouse, "run_id LIKE 'vllm_llama%'")
    (computed,) = _rows(warehouse, "run_id LIKE 'lists%'")
    assert (shown["source"], shown["completed"], shown["failed"]) == ("summary+requests", 200, 0)
    assert math.isinf(shown["request_rate"]) and shown["total_output_tokens"] == 42398
    printed = [key for key in document if key.endswith("_ms")]
    assert len(printed) == 12  # TTFT, TPOT and ITL: mean, median, std, p99
    for key in printed:
        assert shown[key] == document[key], key
        # The file keeps no latencies: a request's is TTFT plus its chunk gaps, which this
        # version's client measured apart from the latency its TPOT used (< 1e-6 relative)
        tolerance = 1e-6 if "_tpot_" in key else 1e-12
        assert computed[key] == pytest.approx(document[key], rel=tolerance), key
    for key in ("request_throughput", "output_throughput", "total_token_throughput"):
        assert computed[key] == pytest.approx(document[key], rel=1e-12), key
    reported = calculate_metrics(outcomes_of(document), document["duration"], {})
    assert not disagreements(computed, reported)


def test_an_sglang_bench_serving_file_of_seven_load_levels(warehouse):
    lines = [json.loads(line) for line in SGLANG.read_text().splitlines()]
    ingest(warehouse, [str(SGLANG)])
    rows = _rows(warehouse, "true")
    assert [row["load_level"] for row in rows] == list(range(7))
    for line, row in zip(lines, rows, strict=True):
        assert row["source"] == "summary"
        assert row["request_rate"] == line["request_rate"]
        for column, key in (
            ("completed", "completed"),
            ("duration_s", "duration"),
            ("total_input_tokens", "total_input_tokens"),
            ("total_output_tokens", "total_output_tokens"),
            ("output_throughput", "output_throughput"),
            ("mean_e2el_ms", "mean_e2e_latency_ms"),
            ("median_e2el_ms", "median_e2e_latency_ms"),
            ("median_ttft_ms", "median_ttft_ms"),
            ("median_itl_ms", "median_itl_ms"),
        ):
            assert row[column] == line[key], column
        # this version printed no request or input throughput: SGLang's are per duration
        assert row["request_throughput"] == line["completed"] / line["duration"]
        assert row["input_throughput"] == line["total_input_tokens"] / line["duration"]


def test_an_aiperf_run_of_its_first_export_layout(warehouse):
    export = json.loads((AIPERF / "profile_export_aiperf.json").read_text())["records"]
    report = ingest(warehouse, [str(AIPERF)])
    assert [(f.fmt, f.rows, f.rejected) for f in report.files] == [
        ("aiperf", 100, 0),
        ("aiperf_summary", 1, 0),
    ]
    (row,) = _rows(warehouse, "true")
    with connect(warehouse) as con:
        (computed,) = (
            con.sql("FROM _serving_computed(NULL, NULL, NULL)").to_arrow_table().to_pylist()
        )
    assert (row["source"], row["max_concurrency"]) == ("summary+requests", 100)
    assert (
        (row["completed"], row["failed"]) == (computed["completed"], computed["failed"]) == (89, 11)
    )
    assert (
        row["total_output_tokens"] == computed["total_output_tokens"] == export["total_osl"]["avg"]
    )
    assert computed["duration_s"] == pytest.approx(export["benchmark_duration"]["avg"])
    names = {
        "ttft": "ttft",  # AIPerf 0.1's name for time to first token
        "tpot": "inter_token_latency",
        "itl": "inter_chunk_latency",
        "e2el": "request_latency",
    }
    for metric, name in names.items():
        for statistic, key in STATISTICS.items():
            column = f"{statistic}_{metric}_ms"
            assert row[column] == export[name][key], column
            assert computed[column] == pytest.approx(export[name][key], rel=1e-12), column
