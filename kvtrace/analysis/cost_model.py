"""A batch-time cost model: least squares of batch (or step) time on the work it did.

``time = intercept + a * prefill_tokens + b * decode_tokens + c * kv_tokens
+ q * prefill_sq_tokens``, fitted per run by ordinary least squares (NumPy ``lstsq``),
the way Vidur and InferMax model a batch's execution time from its token counts.
``prefill_sq_tokens`` is the sum of the squared prompt (chunk) lengths of the batch's
prefill requests: prefill attention grows with the square of a prompt's length, and
Vidur predicts a batch's prefill attention from exactly this sum (its
``sklearn_execution_time_predictor._get_attention_prefill_execution_time``, which looks
up the time of one prefill of length sqrt(sum p_i^2); microsoft/vidur 7d47513).
Sources:

- ``batches``: ``batch_metrics`` (simulator batches): prefill and decode tokens; no KV
  term, since simulators do not report the KV read.  The file holds a batch's totals, not
  its requests' lengths, so the squared term is known only for a batch with at most one
  prefill request (batch_size - decode_tokens, a decode request being one token): then it
  is prefill_tokens squared.  A run with a batch of several prefill requests (or counts
  that do not add up) does not carry the per-request prompt lengths: its quadratic term
  is left out (NULL) and the rest is fitted as without it;
- ``dsa``: traced DSA decode steps (``dsa_steps`` with a step latency, grouped by the
  tracer's batched step counter): decode tokens = requests in the step, KV tokens =
  selected blocks x block size summed over the step's rows, at the stored block size.

A term with no variation in a run is left out (its coefficient NULL) rather than fitted
to noise, and so is the quadratic term when it is a multiple of the linear ones (prompts
of one length).  R^2 = 1 - SS_res / SS_tot; residuals are observed - fitted, in seconds.
Leave-one-out error is exact, without refitting: the least-squares residual of batch i
left out of the fit is e_i / (1 - h_ii), h_ii the diagonal of the hat matrix
X (X'X)^+ X' (a batch with h_ii = 1, alone in fixing a coefficient, is refitted without
it instead).  LOO RMSE is the root mean square of those residuals; LOO MAPE their mean
of |residual| / observed time over batches of positive time, as a fraction.
"""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np

from kvtrace.errors import QueryError

COST_SOURCES = ("batches", "dsa")
TERMS = ("prefill_tokens", "decode_tokens", "kv_tokens", "prefill_sq_tokens")
_LINEAR = TERMS[:3]
_QUERIES = {
    "batches": """
        SELECT run_id, execution_time_s AS seconds, prefill_tokens, decode_tokens,
               NULL::DOUBLE AS kv_tokens,
               CASE WHEN prefill_tokens = 0 THEN 0.0
                    WHEN batch_size - decode_tokens = 1 THEN prefill_tokens::DOUBLE ^ 2
               END AS prefill_sq_tokens
        FROM batch_metrics ORDER BY run_id, batch_idx""",
    "dsa": """
        SELECT run_id, any_value(step_latency_us) / 1e6 AS seconds, 0 AS prefill_tokens,
               count(DISTINCT request_id) AS decode_tokens,
               sum(unique_blocks * block_size) AS kv_tokens, 0.0 AS prefill_sq_tokens
        FROM dsa_steps
        WHERE step_latency_us IS NOT NULL AND batch_step IS NOT NULL
          AND block_size = (SELECT min(block_size) FROM dsa_steps AS s
                            WHERE s.run_id = dsa_steps.run_id)
        GROUP BY run_id, batch_step ORDER BY run_id, batch_step""",
}


def cost_model_rows(con: duckdb.DuckDBPyConnection, source: str) -> list[dict[str, Any]]:
    """One fitted model per run of ``source``."""
    if source not in COST_SOURCES:
        raise QueryError(
            f"expected one of {', '.join(COST_SOURCES)} for the source, got {source!r}"
        )
    table = con.sql(_QUERIES[source]).to_arrow_table()
    runs = table["run_id"].to_numpy(zero_copy_only=False)
    rows = []
    for run_id in dict.fromkeys(runs):
        chosen = runs == run_id
        y = np.asarray(table["seconds"].to_numpy(zero_copy_only=False), float)[chosen]
        features = {
            t: np.asarray(table[t].to_numpy(zero_copy_only=False), float)[chosen] for t in TERMS
        }
        rows.append(fit_cost_model(str(run_id), source, y, features))
    return rows


def _varies(x: np.ndarray) -> bool:
    return bool(np.isfinite(x).all() and np.ptp(x) > 0)


def fit_cost_model(
    run_id: str, source: str, y: np.ndarray, features: dict[str, np.ndarray]
) -> dict[str, Any]:
    """The fitted row of one run: ``y`` batch seconds, ``features`` per term of `TERMS`."""
    used = [t for t in _LINEAR if _varies(features[t])]
    design = np.column_stack([np.ones(len(y)), *(features[t] for t in used)])
    squared = features["prefill_sq_tokens"]
    if _varies(squared):
        with_squared = np.column_stack([design, squared])
        if np.linalg.matrix_rank(with_squared) > np.linalg.matrix_rank(design):
            used.append("prefill_sq_tokens")
            design = with_squared
    coefficients, *_ = np.linalg.lstsq(design, y, rcond=None)
    residuals = y - design @ coefficients
    total = float(((y - y.mean()) ** 2).sum())
    fitted = dict(zip(used, coefficients[1:], strict=True))
    loo = leave_one_out_residuals(design, y)
    positive = y > 0
    return {
        "run_id": run_id,
        "source": source,
        "observations": len(y),
        "intercept_s": float(coefficients[0]),
        **{f"per_{t[:-1]}_s": (float(fitted[t]) if t in fitted else None) for t in TERMS},
        "r2": 1 - float((residuals**2).sum()) / total if total > 0 else None,
        **{f"residual_p{q}_s": float(np.percentile(residuals, q)) for q in (50, 90, 99)},
        "loo_rmse_s": float(np.sqrt((loo**2).mean())) if loo is not None else None,
        "loo_mape": (
            float((np.abs(loo[positive]) / y[positive]).mean())
            if loo is not None and positive.any()
            else None
        ),
    }


def leave_one_out_residuals(design: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    """Per row, observed - predicted by the least-squares fit of the other rows (None
    when there are no more rows than coefficients): e_i / (1 - h_ii), refitting only the
    rows whose leverage h_ii is 1."""
    rows, columns = design.shape
    if rows <= columns:
        return None
    u, singular, _ = np.linalg.svd(design, full_matrices=False)
    rank_columns = singular > singular[0] * max(design.shape) * np.finfo(float).eps
    leverage = (u[:, rank_columns] ** 2).sum(axis=1)
    coefficients, *_ = np.linalg.lstsq(design, y, rcond=None)
    residuals = y - design @ coefficients
    loo = np.empty(rows)
    alone = leverage > 1 - 1e-9
    loo[~alone] = residuals[~alone] / (1 - leverage[~alone])
    for i in np.flatnonzero(alone):
        others = np.arange(rows) != i
        refit, *_ = np.linalg.lstsq(design[others], y[others], rcond=None)
        loo[i] = y[i] - design[i] @ refit
    return loo
