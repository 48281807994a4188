"""Benchmark and simulator results: latency percentiles, SLOs and simulator fidelity."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kvtrace import connect
from kvtrace.ingest import ingest

VLLM = {
    "backend": "vllm",
    "model_id": "m",
    "duration": 10.0,
    "completed": 3,
    "input_lens": [100, 200, 300, 400],
    "output_lens": [3, 2, 0, 4],
    "ttfts": [0.1, 0.2, 0.0, 0.4],
    "itls": [[0.01, 0.03], [0.02], [], [0.05, 0.05, 0.05]],
    "errors": ["", "", "timeout", ""],
}
VIDUR_HEADER = (
    "Request Id,request_num_prefill_tokens,request_num_decode_tokens,"
    "request_e2e_time,request_scheduling_delay,prefill_e2e_time,"
    "decode_time_execution_plus_preemption_normalized,request_num_restarts,"
    "request_arrived_at\n"
)


@pytest.fixture
def results(warehouse, tmp_path):
    measured = tmp_path / "vllm-run.json"
    measured.write_text(json.dumps(VLLM))
    simulated = tmp_path / "request_metrics.csv"
    simulated.write_text(
        VIDUR_HEADER + "0,100,3,0.2,0.01,0.12,0.03,0,0.0\n"
        "1,200,2,0.3,0.02,0.25,0.025,1,0.5\n"
        "2,-5,4,0.6,0.0,0.5,0.05,0,1.0\n"  # negative length
        "3,400,4,0.7,0.0,0.5,0.05,0,1.5\n"
    )
    batches = tmp_path / "batch_metrics.csv"
    batches.write_text(
        "Batch Id,batch_size,batch_num_tokens,batch_num_prefill_tokens,"
        "batch_num_decode_tokens,batch_execution_time\n"
        "0,2,300,300,0,0.05\n1,2,2,0,2,0.01\nx,1,1,0,1,oops\n"
    )
    report = ingest(warehouse, [str(measured), str(simulated), str(batches)])
    assert [(f.fmt, f.rows, f.rejected) for f in report.files] == [
        ("vllm", 4, 0),
        ("vidur_requests", 3, 1),
        ("vidur_batches", 2, 1),
    ]
    con = connect(warehouse)
    yield con
    con.close()


def test_latency_percentiles_leave_failed_requests_out(results):
    row = results.execute(
        "SELECT origin, completed, median_ttft_ms, median_tpot_ms, median_e2el_ms "
        "FROM serving_benchmark s JOIN runs r USING (run_id) WHERE r.run_name = 'vllm-run'"
    ).fetchall()
    # of 0.1, 0.2, 0.4; of 0.04/2, 0.02/1, 0.15/3; of 0.14, 0.22, 0.55
    assert row == [("measured", 3, pytest.approx(200), pytest.approx(20), pytest.approx(220))]


def test_slo_attainment_and_goodput(results):
    row = results.execute(
        "SELECT requests, failed, met, attainment, span_s, goodput_per_s "
        "FROM timing_slo_attainment(ttft_slo_s := 0.25, tpot_slo_s := 0.03) s "
        "JOIN runs r USING (run_id) WHERE r.run_name = 'vllm-run'"
    ).fetchone()
    assert row == (4, 1, 2, 0.5, 10.0, pytest.approx(0.2))
    simulated = results.execute(
        "SELECT met, span_s FROM timing_slo_attainment(e2e_slo_s := 0.5) s JOIN runs r "
        "USING (run_id) WHERE r.run_name = 'request_metrics'"
    ).fetchone()
    assert simulated == (2, pytest.approx(1.5 + 0.7))  # last completion 2.2, first arrival 0


def test_fidelity_compares_percentile_by_percentile(results):
    rows = {
        (m, p): (meas, sim, err)
        for m, p, meas, sim, err in results.execute(
            "SELECT * FROM timing_fidelity('vllm-run', 'request_metrics')"
        ).fetchall()
    }
    measured_ttft = np.percentile([0.1, 0.2, 0.4], 90)
    simulated_ttft = np.percentile([0.12, 0.25, 0.5], 90)
    assert rows[("ttft", "p90")] == (
        pytest.approx(measured_ttft),
        pytest.approx(simulated_ttft),
        pytest.approx((simulated_ttft - measured_ttft) / measured_ttft),
    )
    assert len(rows) == 9


def test_rejected_rows_say_why_and_batches_are_kept(results):
    reasons = results.execute("SELECT line_no, reason FROM quarantine ORDER BY reason").fetchall()
    assert reasons == [
        (4, "batch_execution_time is not a number"),
        (4, "request_num_prefill_tokens is negative"),
    ]
    batches = results.execute(
        "SELECT batch_idx, batch_size, prefill_tokens, decode_tokens, "
        "execution_time_s FROM batch_metrics ORDER BY 1"
    ).fetchall()
    assert batches == [(0, 2, 300, 0, 0.05), (1, 2, 0, 2, 0.01)]


def test_the_cost_model_recovers_known_coefficients(warehouse, tmp_path):
    rng = np.random.default_rng(0)
    prefill = rng.integers(0, 4000, 200)
    decode = rng.integers(1, 64, 200)
    seconds = 0.004 + 2e-6 * prefill + 1.5e-4 * decode  # exact: the fit must find it
    lines = ["batch_size,batch_num_prefill_tokens,batch_num_decode_tokens,batch_execution_time"]
    lines += [f"{d},{p},{d},{float(s)!r}" for p, d, s in zip(prefill, decode, seconds, strict=True)]
    (tmp_path / "batch_metrics.csv").write_text("\n".join(lines) + "\n")
    ingest(warehouse, [str(tmp_path / "batch_metrics.csv")])
    row = (
        connect(warehouse)
        .execute(
            "SELECT observations, intercept_s, per_prefill_token_s, per_decode_token_s, "
            "per_kv_token_s, r2, residual_p99_s FROM timing_cost_model()"
        )
        .fetchone()
    )
    assert row[0] == 200
    assert row[1:4] == (pytest.approx(0.004), pytest.approx(2e-6), pytest.approx(1.5e-4))
    assert row[4] is None and row[5] == pytest.approx(1.0)
    assert abs(row[6]) < 1e-9


def test_the_cost_model_of_traced_dsa_steps(warehouse):
    from kvtrace.collectors.dsa_tracer import DsaTracer

    with DsaTracer(
        warehouse, run_name="steps", dataset="unit", block_sizes=(16,), topk=8
    ) as tracer:
        for request in (0, 1, 2):
            tracer.begin_request(request, list(range(200)))
        for step in range(12):  # batches of 1 to 3 requests, each selecting 8 positions
            batch = {r: 200 + step for r in range(1 + step % 3)}
            with tracer.step(batch):
                picks = np.array([np.arange(0, 8 * (r + 1) * 2, 2 * (r + 1))[:8] for r in batch])
                tracer.record_topk(0, picks)
    row = (
        connect(warehouse)
        .execute(
            "SELECT observations, per_decode_token_s IS NOT NULL, per_kv_token_s IS NOT NULL, "
            "per_prefill_token_s FROM timing_cost_model('dsa')"
        )
        .fetchone()
    )
    assert row == (12, True, True, None)


def test_aiperf_records_become_measured_timings(warehouse, tmp_path):
    def record(n: int, start_ns: int, ttft_ms: float, latency_ms: float) -> dict:
        return {
            "metadata": {"session_num": n, "request_start_ns": start_ns},
            "metrics": {
                "input_sequence_length": {"value": 550, "unit": "tokens"},
                "output_sequence_length": {"value": 3, "unit": "tokens"},
                "time_to_first_token": {"value": ttft_ms, "unit": "ms"},
                "inter_chunk_latency": {"value": [5.0, 7.0], "unit": "ms"},
                "inter_token_latency": {"value": 6.0, "unit": "ms"},
                "request_latency": {"value": latency_ms, "unit": "ms"},
            },
            "error": None,
        }

    failed = {
        "metadata": {"session_num": 2, "request_start_ns": 3_000_000_000},
        "metrics": {"error_isl": {"value": 550, "unit": "tokens"}},
        "error": {
            "code": 499,
            "type": "RequestCancellationError",
            "message": "Request was cancelled",
        },
    }
    bad = record(3, 4_000_000_000, 10.0, 20.0)
    bad["metrics"]["request_latency"]["unit"] = "tokens"
    (tmp_path / "profile_export.jsonl").write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                record(0, 1_000_000_000, 250.0, 262.0),
                record(1, 1_500_000_000, 100.0, 112.0),
                failed,
                bad,
            ]
        )
        + "\n"
    )
    report = ingest(warehouse, [str(tmp_path / "profile_export.jsonl")])
    assert [(f.fmt, f.rows, f.rejected) for f in report.files] == [("aiperf", 3, 1)]
    con = connect(warehouse)
    rows = con.execute(
        "SELECT request_idx, arrival_s, input_tokens, ttft_s, itl_s, tpot_s, "
        "e2e_s, error FROM request_timings ORDER BY 1"
    ).fetchall()
    assert rows[0] == (0, 0.0, 550, 0.25, [0.005, 0.007], 0.006, 0.262, None)
    assert rows[1][:2] == (1, 0.5)
    assert rows[2] == (
        2,
        2.0,
        550,
        None,
        None,
        None,
        None,
        "RequestCancellationError: Request was cancelled",
    )
    reason = con.execute("SELECT reason FROM quarantine").fetchone()[0]
    assert reason == "bad record: request_latency is in 'tokens', not a unit of time"


def test_the_readme_examples_agree_with_numpy(warehouse):
    from pathlib import Path

    folder = Path(__file__).parent.parent / "data" / "workload"
    ingest(
        warehouse,
        [
            str(folder / "vllm_bench_example.json"),
            str(folder / "vidur_request_metrics_example.csv"),
        ],
    )
    document = json.loads((folder / "vllm_bench_example.json").read_text())
    ok = [i for i, e in enumerate(document["errors"]) if not e]
    ttft = np.array(document["ttfts"])[ok]
    e2e = np.array([document["ttfts"][i] + sum(document["itls"][i]) for i in ok])
    con = connect(warehouse)
    ((p90_ttft_ms, p90_e2el_ms),) = con.execute(
        "SELECT p90_ttft_ms, p90_e2el_ms FROM serving_benchmark s JOIN runs r USING (run_id) "
        "WHERE r.run_name = 'vllm_bench_example'"
    ).fetchall()
    assert p90_ttft_ms == pytest.approx(np.percentile(ttft, 90) * 1e3)
    assert p90_e2el_ms == pytest.approx(np.percentile(e2e, 90) * 1e3)
    met = con.execute(
        "SELECT met FROM timing_slo_attainment(ttft_slo_s := 0.25, tpot_slo_s := "
        "0.025) s JOIN runs r USING (run_id) WHERE r.run_name = "
        "'vllm_bench_example'"
    ).fetchone()[0]
    tpot = [np.mean(document["itls"][i]) for i in ok]
    assert met == sum(t <= 0.25 and p <= 0.025 for t, p in zip(ttft, tpot, strict=True))
