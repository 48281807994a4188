"""Cached prompt tokens of serving-benchmark files: SGLang's ``--cache-report`` (per
request and per tier), AIPerf's usage cache reads, and the tools that record none.

The SGLang lines are written with the keys sglang 0.5.23's
``sglang/benchmark/serving.py`` writes (its ``result`` dict, ``cache_report`` and
``result_details``: ``cached_tokens`` and ``cached_tokens_details`` per request, the
details as ``get_cached_tokens_details`` in
``sglang/srt/managers/scheduler_components/output_streamer.py`` builds them: null when
nothing was cached, ``{"device", "host"}``, and ``storage`` / ``storage_backend`` with an
L3 storage backend).  AIPerf's records and export carry the usage metrics of AIPerf
0.13.0 (``aiperf/metrics/types/usage_cache_metrics.py``, ``usage_total_metrics.py``):
``{"value", "unit": "tokens"}`` per record, ``{"unit", "avg"}`` in the export.  Every
expected rate below is worked by hand in the comments.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.conftest import DATA

AIPERF = DATA / "workload" / "aiperf-example-concurrency8"
GENAI_PERF = DATA / "workload" / "genai-perf-example-concurrency4"
VLLM = DATA / "workload" / "vllm_bench_example.json"
CACHE_COLUMNS = (
    "total_cached_tokens",
    "device_cached_tokens",
    "host_cached_tokens",
    "storage_cached_tokens",
    "prefix_hit_rate",
    "device_hit_rate",
    "host_hit_rate",
    "storage_hit_rate",
)

# Load level 0: a server without a storage backend.  Four requests of 1,000 prompt
# tokens: 600 cached on the GPU; 300 cached, 100 on the GPU and 200 loaded back from
# host memory; nothing cached (no details); and a failed request (SGLang leaves its
# cached tokens at 0 and counts it nowhere).  SGLang's cache_report over the three
# successful ones: 3,000 prompt tokens, 900 cached (30 %), device 700, host 200,
# storage None.  So prefix_hit_rate 900 / 3,000 = 0.3, device 700 / 3,000 = 0.23333,
# host 200 / 3,000 = 0.06667, storage NULL.
NO_STORAGE = [
    (1000, 600, {"device": 600, "host": 0}, ""),
    (1000, 300, {"device": 100, "host": 200}, ""),
    (1000, 0, None, ""),
    (1000, 0, None, "Traceback: ClientConnectorError"),
]
NO_STORAGE_REPORT = {
    "total_prompt_tokens": 3000,
    "total_cached_tokens": 900,
    "cache_hit_rate_pct": 30.0,
    "device_cached_tokens": 700,
    "host_cached_tokens": 200,
    "storage_cached_tokens": None,
    "storage_backend": None,
}
# Load level 1: HiCache with a file storage backend.  Three requests of 1,024 tokens:
# 512 from storage; 256 on the GPU and 256 from host memory (storage 0); nothing
# cached.  cache_report: 3,072 prompt tokens, 1,024 cached, device 256, host 256,
# storage 512.  prefix_hit_rate 1,024 / 3,072 = 1/3, device and host 256 / 3,072 =
# 1/12 each, storage 512 / 3,072 = 1/6.
BACKEND = {"storage_backend": "HiCacheFile"}
WITH_STORAGE = [
    (1024, 512, {"device": 0, "host": 0, "storage": 512, **BACKEND}, ""),
    (1024, 512, {"device": 256, "host": 256, "storage": 0, **BACKEND}, ""),
    (1024, 0, None, ""),
]
WITH_STORAGE_REPORT = {
    "total_prompt_tokens": 3072,
    "total_cached_tokens": 1024,
    "cache_hit_rate_pct": 33.33,
    "device_cached_tokens": 256,
    "host_cached_tokens": 256,
    "storage_cached_tokens": 512,
    "storage_backend": "HiCacheFile",
}


def sglang_line(requests: list[tuple], report: dict | None, rate: float) -> dict:
    """One line of ``bench_serving --output-details [--cache-report]`` for ``requests``
    (prompt tokens, cached tokens, details, error), its summary from the successful
    ones as SGLang computes it (8 output tokens each, 25 ms to the first, 10 ms apart)."""
    ok = [r for r in requests if not r[3]]
    ttfts = [0.025 if not r[3] else 0.0 for r in requests]
    itls = [[0.01] * 7 if not r[3] else [] for r in requests]
    e2e = [0.025 + 0.07] * len(ok)
    duration = 2.0
    stats = {}
    for name, values in (
        ("ttft", [0.025] * len(ok)),
        ("tpot", [0.01] * len(ok)),
        ("itl", [0.01] * 7 * len(ok)),
        ("e2e_latency", e2e),
    ):
        ms = np.asarray(values) * 1e3
        stats |= {
            f"mean_{name}_ms": float(ms.mean()),
            f"median_{name}_ms": float(np.median(ms)),
            f"std_{name}_ms": float(ms.std()),
            f"p90_{name}_ms": float(np.percentile(ms, 90)),
            f"p95_{name}_ms": float(np.percentile(ms, 95)),
            f"p99_{name}_ms": float(np.percentile(ms, 99)),
        }
    total_input = sum(r[0] for r in ok)
    line = {
        "tag": None,
        "backend": "sglang",
        "dataset_name": "generated-shared-prefix",
        "request_rate": rate,
        "max_concurrency": None,
        "sharegpt_output_len": None,
        "random_input_len": 1024,
        "random_output_len": 8,
        "random_range_ratio": 0.0,
        "server_info": None,
        "duration": duration,
        "completed": len(ok),
        "total_input_tokens": total_input,
        "total_input_text_tokens": total_input,
        "total_input_vision_tokens": 0,
        "total_output_tokens": 8 * len(ok),
        "total_output_tokens_retokenized": 8 * len(ok),
        "request_throughput": len(ok) / duration,
        "input_throughput": total_input / duration,
        "output_throughput": 8 * len(ok) / duration,
        "total_throughput": (total_input + 8 * len(ok)) / duration,
        **stats,
        "concurrency": 0.3,
        "accept_length": None,
        "max_output_tokens_per_s": 80.0,
        "max_concurrent_requests": 2,
    }
    if report is not None:
        line["cache_report"] = report
    line |= {
        "input_lens": [r[0] for r in requests],
        "output_lens": [8 if not r[3] else 0 for r in requests],
        "ttfts": ttfts,
        "itls": itls,
        "generated_texts": ["" for _ in requests],
        "errors": [r[3] for r in requests],
    }
    if report is not None:
        line["cached_tokens"] = [r[1] for r in requests]
        line["cached_tokens_details"] = [r[2] for r in requests]
    return line


def _write_lines(path, lines: list[dict]):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _cache_rows(warehouse, source: str) -> list[dict]:
    columns = ", ".join(("load_level", *CACHE_COLUMNS))
    table = connect(warehouse).sql(f"SELECT {columns} FROM {source} ORDER BY load_level")
    return table.to_arrow_table().to_pylist()


def _expect(row: dict, tokens: tuple, rates: tuple) -> None:
    assert tuple(row[c] for c in CACHE_COLUMNS[:4]) == tokens
    for column, rate in zip(CACHE_COLUMNS[4:], rates, strict=True):
        assert row[column] == (None if rate is None else pytest.approx(rate)), column


NO_STORAGE_TOKENS = (900, 700, 200, None)
NO_STORAGE_RATES = (0.3, 700 / 3000, 200 / 3000, None)
WITH_STORAGE_TOKENS = (1024, 256, 256, 512)
WITH_STORAGE_RATES = (1 / 3, 1 / 12, 1 / 12, 1 / 6)


@pytest.fixture
def cache_report_file(tmp_path):
    plain = sglang_line(NO_STORAGE, None, 2.0)  # a line run without --cache-report
    return _write_lines(
        tmp_path / "gsp_sweep.jsonl",
        [
            sglang_line(NO_STORAGE, NO_STORAGE_REPORT, 1.0),
            sglang_line(WITH_STORAGE, WITH_STORAGE_REPORT, 4.0),
            plain,
        ],
    )


def test_sglang_cache_report_fills_the_hit_rate_and_its_tiers(warehouse, cache_report_file):
    ingest(warehouse, [str(cache_report_file)])
    level0, level1, level2 = _cache_rows(warehouse, "serving_benchmark")
    _expect(level0, NO_STORAGE_TOKENS, NO_STORAGE_RATES)
    _expect(level1, WITH_STORAGE_TOKENS, WITH_STORAGE_RATES)
    assert all(level2[c] is None for c in CACHE_COLUMNS)  # no --cache-report: unknown


def test_the_per_request_tiers_give_the_same_rates_as_sglang_printed(warehouse, cache_report_file):
    ingest(warehouse, [str(cache_report_file)])
    computed = (
        connect(warehouse)
        .sql(
            "SELECT load_level, "
            + ", ".join(CACHE_COLUMNS)
            + " FROM _serving_computed(NULL, NULL, "
            "NULL) ORDER BY load_level"
        )
        .to_arrow_table()
        .to_pylist()
    )
    _expect(computed[0], NO_STORAGE_TOKENS, NO_STORAGE_RATES)
    _expect(computed[1], WITH_STORAGE_TOKENS, WITH_STORAGE_RATES)
    printed = _cache_rows(warehouse, "benchmark_summaries")
    _expect(printed[0], NO_STORAGE_TOKENS, NO_STORAGE_RATES)
    _expect(printed[1], WITH_STORAGE_TOKENS, WITH_STORAGE_RATES)


def test_each_request_keeps_its_cached_tokens_by_tier(warehouse, cache_report_file):
    ingest(warehouse, [str(cache_report_file)])
    rows = (
        connect(warehouse)
        .sql(
            "SELECT load_level, request_idx, cached_tokens, device_cached_tokens, "
            "host_cached_tokens, storage_cached_tokens FROM request_timings ORDER BY ALL"
        )
        .fetchall()
    )
    assert rows == [
        (0, 0, 600, 600, 0, None),
        (0, 1, 300, 100, 200, None),
        (0, 2, 0, 0, 0, None),  # nothing cached: no details, 0 on device and host
        (0, 3, 0, 0, 0, None),  # the failed request, as SGLang leaves it
        (1, 0, 512, 0, 0, 512),
        (1, 1, 512, 256, 256, 0),
        (1, 2, 0, 0, 0, None),
        (2, 0, None, None, None, None),  # the line without --cache-report
        (2, 1, None, None, None, None),
        (2, 2, None, None, None, None),
        (2, 3, None, None, None, None),
    ]


def test_cached_tokens_without_details_leave_the_tiers_unknown(warehouse, tmp_path):
    # an SGLang server that gives cached_tokens but no cached_tokens_details: 500 of
    # 1,000 and 0 of 1,000 cached -> prefix_hit_rate 500 / 2,000 = 0.25, tiers unknown
    # for the first request; the second (nothing cached) is 0 on device and host, so
    # device_hit_rate = 0 / 2,000 = 0, computed over every request with cached tokens
    line = sglang_line([(1000, 500, None, ""), (1000, 0, None, "")], None, 1.0)
    line |= {"cached_tokens": [500, 0]}
    ingest(warehouse, [str(_write_lines(tmp_path / "old_server.jsonl", [line]))])
    (row,) = _cache_rows(warehouse, "serving_benchmark")
    assert row["total_cached_tokens"] == 500
    assert row["prefix_hit_rate"] == pytest.approx(0.25)
    assert row["device_cached_tokens"] == 0 and row["device_hit_rate"] == 0
    assert row["storage_cached_tokens"] is None and row["storage_hit_rate"] is None


def test_bad_cache_details_keep_the_summary_and_a_bad_cache_report_quarantines_the_line(
    warehouse, tmp_path
):
    short = sglang_line(NO_STORAGE, NO_STORAGE_REPORT, 1.0)
    short["cached_tokens"] = short["cached_tokens"][:-1]  # one value short
    broken = sglang_line(NO_STORAGE, NO_STORAGE_REPORT, 2.0)
    broken["cache_report"] = "900 cached"
    negative = sglang_line(NO_STORAGE, NO_STORAGE_REPORT, 4.0)
    negative["cached_tokens_details"][0] = {"device": -1, "host": 0}
    path = _write_lines(tmp_path / "sweep.jsonl", [short, broken, negative])
    ingest(warehouse, [str(path)])
    con = connect(warehouse)
    rows = _cache_rows(warehouse, "serving_benchmark")
    assert [row["load_level"] for row in rows] == [0, 2]
    _expect(rows[0], NO_STORAGE_TOKENS, NO_STORAGE_RATES)  # the printed report stands
    _expect(rows[1], NO_STORAGE_TOKENS, NO_STORAGE_RATES)
    assert con.sql("SELECT count(*) FROM request_timings").fetchall() == [(0,)]
    reasons = [r for (r,) in con.sql("SELECT reason FROM quarantine ORDER BY line_no").fetchall()]
    assert "cached_tokens must be a list of one value per request (4" in reasons[0]
    assert "cache_report must be an object" in reasons[1]
    assert "cached_tokens_details[0].device" in reasons[2]


def _aiperf_record(index: int, prompt: int, cached: int) -> dict:
    """An AIPerf 0.13 record (profile_export.jsonl) with the usage metrics a server's
    ``usage`` gives it."""
    start = 1_764_000_000_000_000_000 + index * 100_000_000
    return {
        "metadata": {
            "session_num": index,
            "x_request_id": f"req-{index:04d}",
            "turn_index": 0,
            "request_start_ns": start,
            "request_end_ns": start + 400_000_000,
            "worker_id": "worker_0",
            "benchmark_phase": "profiling",
            "was_cancelled": False,
        },
        "metrics": {
            "input_sequence_length": {"value": prompt, "unit": "tokens"},
            "time_to_first_token": {"value": 40.0, "unit": "ms"},
            "request_latency": {"value": 400.0, "unit": "ms"},
            "output_sequence_length": {"value": 10, "unit": "tokens"},
            "inter_token_latency": {"value": 40.0, "unit": "ms"},
            "usage_prompt_tokens": {"value": prompt + 32, "unit": "tokens"},
            "usage_prompt_cache_read_tokens": {"value": cached, "unit": "tokens"},
        },
        "error": None,
    }


def test_aiperf_cache_reads_fill_the_hit_rate_without_tiers(warehouse, tmp_path):
    # records: (400 prompt tokens, 200 read from cache), (600, 0), (1,000, 500): 700 of
    # 2,000 input tokens = 0.35 computed from the records.  The export's own figure
    # counts against the server's prompt tokens (32 more per request: 2,096):
    # overall_usage_prompt_cache_read_pct 700 / 2,096 = 33.397 %, and that printed
    # number is the one shown.
    folder = tmp_path / "aiperf-cache"
    folder.mkdir()
    records = [_aiperf_record(0, 400, 200), _aiperf_record(1, 600, 0), _aiperf_record(2, 1000, 500)]
    _write_lines(folder / "profile_export.jsonl", records)
    ingest(warehouse, [str(folder / "profile_export.jsonl")])
    computed = _cache_rows(warehouse, "serving_benchmark")[0]
    assert computed["total_cached_tokens"] == 700
    assert computed["prefix_hit_rate"] == pytest.approx(0.35)
    assert all(computed[c] is None for c in CACHE_COLUMNS[1:4] + CACHE_COLUMNS[5:])

    export = json.loads((AIPERF / "profile_export_aiperf.json").read_text())
    export["total_usage_prompt_tokens"] = {"unit": "tokens", "avg": 2096.0}
    export["total_usage_prompt_cache_read_tokens"] = {"unit": "tokens", "avg": 700.0}
    export["overall_usage_prompt_cache_read_pct"] = {"unit": "%", "avg": 700 / 2096 * 100}
    (folder / "profile_export_aiperf.json").write_text(json.dumps(export))
    ingest(warehouse, [str(folder / "profile_export_aiperf.json")])
    (row,) = (
        connect(warehouse)
        .sql(
            "SELECT source, total_cached_tokens, prefix_hit_rate, device_hit_rate "
            "FROM serving_benchmark"
        )
        .fetchall()
    )
    assert row[:2] == ("summary+requests", 700)
    assert row[2] == pytest.approx(700 / 2096)
    assert row[3] is None


def test_an_aiperf_export_without_a_percentage_divides_its_totals(warehouse, tmp_path):
    folder = tmp_path / "aiperf-totals"
    shutil.copytree(AIPERF, folder)
    export = json.loads((folder / "profile_export_aiperf.json").read_text())
    export["total_usage_prompt_tokens"] = {"unit": "tokens", "avg": 4000.0}
    export["total_usage_prompt_cache_read_tokens"] = {"unit": "tokens", "avg": 1000.0}
    (folder / "profile_export_aiperf.json").write_text(json.dumps(export))
    ingest(warehouse, [str(folder / "profile_export_aiperf.json")])
    ((rate,),) = (
        connect(warehouse).sql("SELECT prefix_hit_rate FROM benchmark_summaries").fetchall()
    )
    assert rate == pytest.approx(1000 / 4000)


def test_tools_that_record_no_cached_tokens_leave_the_columns_null(warehouse):
    # vLLM's bench serve result, AIPerf's records and export without usage metrics, and
    # GenAI-Perf's export: nothing to fill the columns with
    ingest(warehouse, [str(VLLM), str(AIPERF), str(GENAI_PERF)])
    rows = _cache_rows(warehouse, "serving_benchmark")
    assert len(rows) == 3
    for row in rows:
        assert all(row[c] is None for c in CACHE_COLUMNS)


def test_an_sglang_line_replayed_from_a_trace_keeps_its_summary(warehouse, tmp_path):
    # bench_serving --use-trace-timestamps writes "request_rate": "trace": no one rate
    line = sglang_line(NO_STORAGE, NO_STORAGE_REPORT, 1.0) | {"request_rate": "trace"}
    ingest(warehouse, [str(_write_lines(tmp_path / "mooncake.jsonl", [line]))])
    assert connect(warehouse).sql(
        "SELECT request_rate, completed, prefix_hit_rate FROM serving_benchmark"
    ).fetchall() == [(None, 3, pytest.approx(0.3))]
