"""A batch-time cost model: least squares of batch (or step) time on the work it did.

``time = intercept + a * prefill_tokens + b * decode_tokens + c * kv_tokens``, fitted per
run by ordinary least squares (NumPy ``lstsq``), the way Vidur and InferMax model a
batch's execution time from its token counts.  Sources:

- ``batches``: ``batch_metrics`` (simulator batches): prefill and decode tokens; no KV
  term, since simulators do not report the KV read;
- ``dsa``: traced DSA decode steps (``dsa_steps`` with a step latency, grouped by the
  tracer's batched step counter): decode tokens = requests in the step, KV tokens =
  selected blocks x block size summed over the step's rows, at the stored block size.

A term with no variation in a run is left out (its coefficient NULL) rather than fitted
to noise.  R^2 = 1 - SS_res / SS_tot; residuals are observed - fitted, in seconds.
"""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np

from kvtrace.errors import QueryError

COST_SOURCES = ("batches", "dsa")
_TERMS = ("prefill_tokens", "decode_tokens", "kv_tokens")
_QUERIES = {
    "batches": """
        SELECT run_id, execution_time_s AS seconds, prefill_tokens, decode_tokens,
               NULL::DOUBLE AS kv_tokens
        FROM batch_metrics ORDER BY run_id, batch_idx""",
    "dsa": """
        SELECT run_id, any_value(step_latency_us) / 1e6 AS seconds, 0 AS prefill_tokens,
               count(DISTINCT request_id) AS decode_tokens,
               sum(unique_blocks * block_size) AS kv_tokens
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
            t: np.asarray(table[t].to_numpy(zero_copy_only=False), float)[chosen] for t in _TERMS
        }
        rows.append(_fit(str(run_id), source, y, features))
    return rows


def _fit(
    run_id: str, source: str, y: np.ndarray, features: dict[str, np.ndarray]
) -> dict[str, Any]:
    used = [t for t, x in features.items() if np.isfinite(x).all() and np.ptp(x) > 0]
    design = np.column_stack([np.ones(len(y)), *(features[t] for t in used)])
    coefficients, *_ = np.linalg.lstsq(design, y, rcond=None)
    residuals = y - design @ coefficients
    total = float(((y - y.mean()) ** 2).sum())
    fitted = dict(zip(used, coefficients[1:], strict=True))
    return {
        "run_id": run_id,
        "source": source,
        "observations": len(y),
        "intercept_s": float(coefficients[0]),
        **{f"per_{t[:-1]}_s": (float(fitted[t]) if t in fitted else None) for t in _TERMS},
        "r2": 1 - float((residuals**2).sum()) / total if total > 0 else None,
        **{f"residual_p{q}_s": float(np.percentile(residuals, q)) for q in (50, 90, 99)},
    }
