"""serving_benchmark_table against the numbers serving benchmarks print: vLLM's
calculate_metrics (vllm/benchmarks/serve.py) written again here with NumPy from the
result file's per-request lists, compared at the two decimals vLLM prints; and the
worked example of the SQL header."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.conftest import DATA

VLLM = DATA / "workload" / "vllm_bench_example.json"


def _vllm_summary(document: dict, goodput_ms: dict[str, float]) -> dict[str, float]:
    """What `vllm bench serve` prints for a result file: its metrics from the lists."""
    ttfts, tpots, itls, e2els, good = [], [], [], [], 0
    total_input = total_output = completed = 0
    for i, error in enumerate(document["errors"]):
        if error:
            continue
        output_len = document["output_lens"][i]
        ttft = document["ttfts"][i]
        latency = ttft + sum(document["itls"][i])  # the streaming client's latency
        tpot = (latency - ttft) / (output_len - 1) if output_len > 1 else 0.0
        if output_len > 1:
            tpots.append(tpot)
        itls += document["itls"][i]
        ttfts.append(ttft)
        e2els.append(latency)
        total_input += document["input_lens"][i]
        total_output += output_len
        completed += 1
        slos = {"ttft": ttft, "tpot": tpot, "e2el": latency}
        good += all(slos[name] * 1e3 <= limit for name, limit in goodput_ms.items())
    duration = document["duration"]
    summary = {
        "completed": completed,
        "failed": len(document["errors"]) - completed,
        "request_throughput": completed / duration,
        "request_goodput": good / duration,
        "output_throughput": total_output / duration,
        "total_token_throughput": (total_input + total_output) / duration,
    }
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        summary[f"mean_{name}_ms"] = np.mean(values) * 1e3
        summary[f"median_{name}_ms"] = np.median(values) * 1e3
        summary[f"std_{name}_ms"] = np.std(values) * 1e3
        summary[f"p90_{name}_ms"] = np.percentile(values, 90) * 1e3
        summary[f"p99_{name}_ms"] = np.percentile(values, 99) * 1e3
    return summary


def test_the_table_prints_what_vllm_prints_for_its_result_file(warehouse):
    ingest(warehouse, [str(VLLM)])
    con = connect(warehouse)
    table = con.sql(
        "FROM serving_benchmark_table(ttft_slo_ms := 250, tpot_slo_ms := 25, e2e_slo_ms := 6000)"
    ).to_arrow_table()
    (row,) = table.to_pylist()
    expected = _vllm_summary(json.loads(VLLM.read_text()), {"ttft": 250, "tpot": 25, "e2el": 6000})
    assert row["completed"] == expected.pop("completed")
    assert row["failed"] == expected.pop("failed")
    for name, value in expected.items():
        assert round(row[name], 2) == round(value, 2), name


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
