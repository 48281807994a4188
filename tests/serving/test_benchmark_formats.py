"""The serving-benchmark table on each benchmark client's files: SGLang's bench_serving
lines, AIPerf's records and summary, GenAI-Perf's export.  Each row must show what the
tool printed (to the two decimals the tools print), and what it did not print must be
computed from its per-request lists as the tools define it (NumPy here)."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

from kvtrace import connect
from kvtrace.errors import InputError
from kvtrace.ingest import ingest
from tests.conftest import DATA
from tests.serving.fixtures import request_rows, write

SGLANG = DATA / "workload" / "sglang_bench_serving_example.jsonl"
AIPERF = DATA / "workload" / "aiperf-example-concurrency8"
GENAI_PERF = DATA / "workload" / "genai-perf-example-concurrency4"
PRINTED = {  # SGLang's result keys, by the table's column names
    "completed": "completed",
    "duration_s": "duration",
    "total_input_tokens": "total_input_tokens",
    "total_output_tokens": "total_output_tokens",
    "request_throughput": "request_throughput",
    "input_throughput": "input_throughput",
    "output_throughput": "output_throughput",
    **{
        f"{stat}_{metric}_ms": f"{stat}_{name}_ms"
        for metric, name in (
            ("ttft", "ttft"),
            ("tpot", "tpot"),
            ("itl", "itl"),
            ("e2el", "e2e_latency"),
        )
        for stat in ("mean", "median", "std", "p99")
    },
}


def _rows(warehouse, where: str = "") -> list[dict]:
    table = connect(warehouse).sql(
        f"FROM serving_benchmark_table(ttft_slo_ms := 300, tpot_slo_ms := 30) {where}"
    )
    return table.to_arrow_table().to_pylist()


def test_every_sglang_load_level_shows_what_bench_serving_printed(warehouse):
    ingest(warehouse, [str(SGLANG)])
    lines = [json.loads(line) for line in SGLANG.read_text().splitlines()]
    rows = _rows(warehouse)
    assert [row["load_level"] for row in rows] == [0, 1, 2]
    assert len({row["run_id"] for row in rows}) == 1  # the file is one run
    for line, row in zip(lines, rows, strict=True):
        for column, key in PRINTED.items():
            assert round(row[column], 2) == round(line[key], 2), column
        assert row["request_rate"] == line["request_rate"]
        assert row["max_concurrency"] == line["max_concurrency"]
        printed_total = (line["total_input_tokens"] + line["total_output_tokens"]) / line[
            "duration"
        ]
        assert round(row["total_token_throughput"], 2) == round(printed_total, 2)
    assert math.isinf(rows[2]["request_rate"])


def test_what_sglang_did_not_print_comes_from_its_per_request_lists(warehouse):
    ingest(warehouse, [str(SGLANG)])
    lines = [json.loads(line) for line in SGLANG.read_text().splitlines()]
    rows = _rows(warehouse)
    for line, row in zip(lines[:2], rows[:2], strict=True):
        ok = [i for i, error in enumerate(line["errors"]) if not error]
        ttfts = [line["ttfts"][i] for i in ok]
        itls = [gap for i in ok for gap in line["itls"][i]]
        assert row["source"] == "summary+requests"
        assert row["failed"] == len(line["errors"]) - len(ok)
        assert row["p90_ttft_ms"] == pytest.approx(np.percentile(ttfts, 90) * 1e3)
        assert row["p90_itl_ms"] == pytest.approx(np.percentile(itls, 90) * 1e3)
        good = 0
        for i in ok:  # e2e is not in the file: TTFT plus the chunk gaps
            out = line["output_lens"][i]
            tpot = sum(line["itls"][i]) / (out - 1) if out > 1 else 0.0
            good += line["ttfts"][i] * 1e3 <= 300 and tpot * 1e3 <= 30
        assert row["request_goodput"] == pytest.approx(good / line["duration"])
    summary_only = rows[2]
    assert summary_only["source"] == "summary"
    assert summary_only["p90_ttft_ms"] is None and summary_only["request_goodput"] is None


def test_an_sglang_file_that_grew_adds_its_new_load_level(warehouse, tmp_path):
    lines = SGLANG.read_text().splitlines()
    path = tmp_path / "sweep.jsonl"
    path.write_text("\n".join(lines[:2]) + "\n")
    ingest(warehouse, [str(path)])
    path.write_text("\n".join(lines) + "\n")  # bench_serving appends the next rate
    ingest(warehouse, [str(path)])
    con = connect(warehouse)
    assert con.sql("SELECT count(*) FROM serving_benchmark").fetchall() == [(3,)]
    assert con.sql("SELECT count(*) FROM request_timings").fetchall() == [(140,)]


def test_a_bad_sglang_line_is_quarantined_and_bad_details_keep_their_summary(warehouse, tmp_path):
    first, second, third = SGLANG.read_text().splitlines()
    broken = json.loads(second)
    broken["ttfts"] = broken["ttfts"][:-1]  # one value short
    path = tmp_path / "sweep.jsonl"
    path.write_text("\n".join([first, '{"completed": "many"', json.dumps(broken), third]) + "\n")
    ingest(warehouse, [str(path)])
    con = connect(warehouse)
    assert con.sql("SELECT load_level, source FROM serving_benchmark").fetchall() == [
        (0, "summary+requests"),
        (2, "summary"),
        (3, "summary"),
    ]
    reasons = [r for (r,) in con.sql("SELECT reason FROM quarantine ORDER BY line_no").fetchall()]
    assert len(reasons) == 2
    assert "invalid JSON" in reasons[0]
    assert "summary kept" in reasons[1] and "ttfts" in reasons[1]


def test_aiperf_summary_and_records_agree_and_the_summary_is_shown(warehouse):
    ingest(warehouse, [str(AIPERF)])
    summary = json.loads((AIPERF / "profile_export_aiperf.json").read_text())
    (row,) = _rows(warehouse)
    assert row["run_id"].startswith("aiperf-example-concurrency8-")  # the folder names it
    assert row["source"] == "summary+requests"
    assert row["max_concurrency"] == 8
    assert row["completed"] == summary["request_count"]["avg"]
    assert row["failed"] == summary["error_request_count"]["avg"]
    assert round(row["duration_s"], 2) == round(summary["benchmark_duration"]["avg"], 2)
    names = {
        "ttft": "time_to_first_token",
        "tpot": "inter_token_latency",  # AIPerf's name for TPOT
        "itl": "inter_chunk_latency",
        "e2el": "request_latency",
    }
    computed = (
        connect(warehouse)
        .sql("FROM _serving_computed(NULL, NULL, NULL)")
        .to_arrow_table()
        .to_pylist()[0]
    )
    for metric, name in names.items():
        for stat, key in (("mean", "avg"), ("median", "p50"), ("std", "std"), ("p90", "p90")):
            column = f"{stat}_{metric}_ms"
            assert round(row[column], 2) == round(summary[name][key], 2), column
            # the records give the same numbers: the definitions agree
            assert computed[column] == pytest.approx(summary[name][key]), column


def test_genai_perf_export_is_a_summary_without_chunk_gaps(warehouse):
    ingest(warehouse, [str(GENAI_PERF)])
    export = json.loads((GENAI_PERF / "profile_export_genai_perf.json").read_text())
    (row,) = _rows(warehouse)
    assert row["run_id"].startswith("genai-perf-example-concurrency4-")
    assert (row["source"], row["max_concurrency"]) == ("summary", 4)
    assert row["request_throughput"] == export["request_throughput"]["avg"]
    assert row["output_throughput"] == export["output_token_throughput"]["avg"]
    assert row["p99_ttft_ms"] == export["time_to_first_token"]["p99"]
    assert row["mean_tpot_ms"] == export["inter_token_latency"]["avg"]
    assert row["mean_itl_ms"] is None


def test_export_units_are_converted_and_an_unknown_unit_is_one_sentence(warehouse, tmp_path):
    export = json.loads((GENAI_PERF / "profile_export_genai_perf.json").read_text())
    ttft = export["time_to_first_token"]
    export["time_to_first_token"] = {
        k: (v / 1e3 if isinstance(v, float) else v) for k, v in ttft.items()
    } | {"unit": "s"}
    folder = tmp_path / "seconds"
    folder.mkdir()
    (folder / "profile_export_genai_perf.json").write_text(json.dumps(export))
    ingest(warehouse, [str(folder)])
    (row,) = _rows(warehouse)
    assert row["mean_ttft_ms"] == pytest.approx(ttft["avg"])
    export["time_to_first_token"]["unit"] = "tokens"
    bad = tmp_path / "bad"
    shutil.copytree(folder, bad)
    (bad / "profile_export_genai_perf.json").write_text(json.dumps(export))
    with pytest.raises(InputError, match="time_to_first_token is in 'tokens', not a unit of time"):
        ingest(warehouse, [str(bad)])


def test_replayed_serving_requests_have_a_row_with_their_prefix_hit_rate(warehouse, tmp_path):
    rows = request_rows()
    for i, row in enumerate(rows):
        row["cached_tokens"] = (i % 4) * 256
    ingest(warehouse, [str(write(tmp_path / "exp_metrics.jsonl", rows))])
    (row,) = _rows(warehouse)
    ok = [r for r in rows if r["status"] == "ok"]
    assert (row["completed"], row["failed"]) == (len(ok), len(rows) - len(ok))
    expected = sum(r["cached_tokens"] for r in ok) / sum(r["input_tokens"] for r in ok)
    assert row["prefix_hit_rate"] == pytest.approx(expected)
    assert row["mean_e2el_ms"] == pytest.approx(np.mean([r["latency_s"] for r in ok]) * 1e3)
    tpots = [(r["latency_s"] - r["ttft_s"]) / (r["output_tokens"] - 1) for r in ok]
    assert row["median_tpot_ms"] == pytest.approx(np.median(tpots) * 1e3)


def test_the_former_latency_names_are_the_benchmark_view(warehouse):
    ingest(warehouse, [str(SGLANG)])
    con = connect(warehouse)
    expected = con.sql("FROM serving_benchmark").fetchall()
    for name in ("latency_summary", "request_latency_summary", "timing_latency_summary"):
        assert con.sql(f"FROM {name}").fetchall() == expected
