"""The batch cost model's quadratic prefill term and its leave-one-out error."""

from __future__ import annotations

import numpy as np
import pytest

from kvtrace import connect
from kvtrace.analysis.cost_model import fit_cost_model, leave_one_out_residuals
from kvtrace.ingest import ingest

HEADER = "batch_size,batch_num_prefill_tokens,batch_num_decode_tokens,batch_execution_time"


def _batches(tmp_path, rows: list[tuple[int, int, int, float]]) -> str:
    path = tmp_path / "batch_metrics.csv"
    lines = [HEADER, *(f"{b},{p},{d},{s!r}" for b, p, d, s in rows)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _fit(warehouse) -> dict:
    cursor = connect(warehouse).execute("FROM timing_cost_model()")
    names = [column[0] for column in cursor.description]
    return dict(zip(names, cursor.fetchone(), strict=True))


def test_the_header_example(warehouse, tmp_path):
    # timing.sql's example: one prefill request per prefill batch, so the squared term is
    # prefill^2: 0.002 + 2e-5 * 100 + 6e-7 * 100^2 = 0.010, 0.002 + 2e-4 * 4 = 0.0028, ...
    rows = [(1, 100, 0, 0.010), (4, 0, 4, 0.0028), (1, 200, 0, 0.030), (8, 0, 8, 0.0036)]
    rows.append((1, 300, 0, 0.062))
    ingest(warehouse, [_batches(tmp_path, rows)])
    fit = _fit(warehouse)
    assert fit["intercept_s"] == pytest.approx(0.002)
    assert fit["per_prefill_token_s"] == pytest.approx(2e-5)
    assert fit["per_decode_token_s"] == pytest.approx(2e-4)
    assert fit["per_prefill_sq_token_s"] == pytest.approx(6e-7)
    assert fit["r2"] == pytest.approx(1.0)
    assert fit["loo_rmse_s"] == pytest.approx(0.0, abs=1e-12)
    assert fit["loo_mape"] == pytest.approx(0.0, abs=1e-9)


def test_known_coefficients_with_the_quadratic_term(warehouse, tmp_path):
    rng = np.random.default_rng(1)
    rows = []
    for _ in range(300):
        if rng.random() < 0.4:  # a prefill batch of one request of 1 to 4,000 tokens
            prompt = int(rng.integers(1, 4000))
            rows.append((1, prompt, 0, 0.003 + 1.5e-5 * prompt + 4e-9 * prompt**2))
        else:  # a decode batch of 1 to 128 requests
            decode = int(rng.integers(1, 128))
            rows.append((decode, 0, decode, 0.003 + 1e-4 * decode))
    ingest(warehouse, [_batches(tmp_path, rows)])
    fit = _fit(warehouse)
    assert fit["observations"] == 300
    assert fit["intercept_s"] == pytest.approx(0.003)
    assert fit["per_prefill_token_s"] == pytest.approx(1.5e-5)
    assert fit["per_decode_token_s"] == pytest.approx(1e-4)
    assert fit["per_prefill_sq_token_s"] == pytest.approx(4e-9)
    assert fit["per_kv_token_s"] is None


def test_without_per_request_prompt_lengths_the_squared_term_is_left_out(warehouse, tmp_path):
    # The second batch holds two prefill requests (batch_size 3, one decode token): their
    # lengths are unknown, so the run's squared term is NULL and the linear fit stands as
    # before: 0.001 + 1e-5 * prefill + 1e-4 * decode exactly.
    rows = [(1, 100, 0, 0.002), (3, 500, 1, 0.0061), (2, 0, 2, 0.0012), (1, 300, 0, 0.004)]
    rows += [(5, 0, 5, 0.0015), (2, 200, 1, 0.0031)]
    ingest(warehouse, [_batches(tmp_path, rows)])
    fit = _fit(warehouse)
    assert fit["per_prefill_sq_token_s"] is None
    assert fit["intercept_s"] == pytest.approx(0.001)
    assert fit["per_prefill_token_s"] == pytest.approx(1e-5)
    assert fit["per_decode_token_s"] == pytest.approx(1e-4)


def test_prompts_of_one_length_leave_the_squared_term_out():
    # prefill in {0, 512}: prefill^2 = 512 * prefill, no information beyond the linear term
    prefill = np.array([0, 512, 0, 512, 512, 0], float)
    decode = np.array([4, 0, 9, 0, 0, 2], float)
    y = 0.001 + 2e-5 * prefill + 1e-4 * decode
    features = {
        "prefill_tokens": prefill,
        "decode_tokens": decode,
        "kv_tokens": np.full(6, np.nan),
        "prefill_sq_tokens": prefill**2,
    }
    fit = fit_cost_model("r", "batches", y, features)
    assert fit["per_prefill_sq_token_s"] is None
    assert fit["per_prefill_token_s"] == pytest.approx(2e-5)


def _refit_loop(design: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Brute force: fit without row i, predict row i."""
    out = []
    for i in range(len(y)):
        others = np.arange(len(y)) != i
        beta, *_ = np.linalg.lstsq(design[others], y[others], rcond=None)
        out.append(y[i] - design[i] @ beta)
    return np.array(out)


def test_leave_one_out_matches_refitting_each_batch():
    rng = np.random.default_rng(7)
    prompt = rng.integers(0, 3000, 80).astype(float)
    decode = rng.integers(0, 64, 80).astype(float)
    design = np.column_stack([np.ones(80), prompt, decode, prompt**2])
    y = 0.002 + 1e-5 * prompt + 2e-4 * decode + 3e-9 * prompt**2 + rng.normal(0, 1e-3, 80)
    assert leave_one_out_residuals(design, y) == pytest.approx(_refit_loop(design, y))

    features = {
        "prefill_tokens": prompt,
        "decode_tokens": decode,
        "kv_tokens": np.full(80, np.nan),
        "prefill_sq_tokens": prompt**2,
    }
    fit = fit_cost_model("r", "batches", y, features)
    brute = _refit_loop(design, y)
    assert fit["loo_rmse_s"] == pytest.approx(float(np.sqrt((brute**2).mean())))
    assert fit["loo_mape"] == pytest.approx(float((np.abs(brute) / y).mean()))
    in_sample = y - design @ np.linalg.lstsq(design, y, rcond=None)[0]
    assert fit["loo_rmse_s"] > float(np.sqrt((in_sample**2).mean()))


def test_a_batch_alone_in_fixing_a_coefficient_is_refitted():
    # The only batch with decode tokens has leverage 1: the shortcut divides by zero, so it
    # is refitted without it (the min-norm fit then gives decode no cost).
    design = np.column_stack([np.ones(5), [10, 20, 30, 40, 0], [0, 0, 0, 0, 7]])
    y = np.array([1.0, 2.1, 2.9, 4.2, 3.0])
    assert leave_one_out_residuals(design, y) == pytest.approx(_refit_loop(design, y))


def test_too_few_batches_have_no_leave_one_out_error():
    design = np.column_stack([np.ones(2), [1.0, 2.0]])
    assert leave_one_out_residuals(design, np.array([1.0, 2.0])) is None
