"""serving_benchmark_table on kvtrace's own vLLM example against vLLM's calculate_metrics
(tests/serving/vllm_metrics.py), and the worked example of the SQL header."""

from __future__ import annotations

import json

import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.conftest import DATA
from tests.serving.vllm_metrics import calculate_metrics, disagreements, outcomes_of

VLLM = DATA / "workload" / "vllm_bench_example.json"


def test_the_table_is_what_vllm_computes_for_the_example(warehouse):
    ingest(warehouse, [str(VLLM)])
    con = connect(warehouse)
    table = con.sql(
        "FROM serving_benchmark_table(ttft_slo_ms := 250, tpot_slo_ms := 25, e2e_slo_ms := 6000)"
    ).to_arrow_table()
    (row,) = table.to_pylist()
    document = json.loads(VLLM.read_text())
    goodput = {"ttft": 250.0, "tpot": 25.0, "e2el": 6000.0}
    reported = calculate_metrics(outcomes_of(document), document["duration"], goodput)
    assert not disagreements(row, reported)


def test_the_worked_example_of_the_sql_header(warehouse, tmp_path):
    document = {
        "duration": 2.0,
        "input_lens": [10, 20],
        "output_lens": [5, 1],
        "ttfts": [0.1, 0.3],
        "itls": [[0.1, 0.1, 0.1, 0.1], []],
        "errors": ["", ""],
        "backend": "vllm",
        "completed": 2,
    }
    path = tmp_path / "result.json"
    path.write_text(json.dumps(document))
    ingest(warehouse, [str(path)])
    con = connect(warehouse)
    ((throughput, ttft_mean, ttft_median, ttft_std, tpot_mean, goodput),) = con.sql(
        "SELECT request_throughput, mean_ttft_ms, median_ttft_ms, std_ttft_ms, mean_tpot_ms, "
        "request_goodput FROM serving_benchmark_table(tpot_slo_ms := 50)"
    ).fetchall()
    assert throughput == pytest.approx(1.0)
    assert (ttft_mean, ttft_median, ttft_std) == pytest.approx((200, 200, 100))
    assert tpot_mean == pytest.approx(100)
    assert goodput == pytest.approx(0.5)


def test_without_an_slo_there_is_no_goodput(warehouse):
    ingest(warehouse, [str(VLLM)])
    con = connect(warehouse)
    assert con.sql("SELECT request_goodput FROM serving_benchmark_table()").fetchall() == [(None,)]
