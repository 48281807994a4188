"""Fetch or recompute: when reading a prefix's KV from a tier beats computing it again.

Fetching n tokens from a tier costs ``latency + n x bytes_per_token x layers / bandwidth``
(one batched read); recomputing them costs ``n x prefill_s_per_token``.  The boundary is
the smallest n for which fetching is faster:

    n* = floor(latency / (c - b)) + 1,   c = prefill s/token, b = transfer s/token,

and fetching never wins when the transfer alone (b) costs at least as much as computing
(c).  Example: 656 B/token x 61 layers = 40,016 B/token over 20 GB/s is 2.0 µs/token;
against a prefill of 10,000 tokens/s (100 µs/token) a 30 µs read pays from
floor(30 / 98) + 1 = 1 token on, and a 30 ms read from 307 tokens on.

The prefill cost is ``--prefill-tok-s`` when given; else the fitted
``timing_cost_model('batches')`` of the warehouse's batch timings (its
per_prefill_token_s); else DeepSeek's published prefill throughput of its V3/R1
inference service, about 73.7k input tokens/s per H800 node (counting cache hits).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import duckdb
import numpy as np

from kvtrace.analysis.cost_model import cost_model_rows
from kvtrace.errors import InputError

if TYPE_CHECKING:
    from kvtrace.analysis.kv_access.whatif import Tier

DEEPSEEK_PREFILL_TOK_S = 73_700.0


@dataclass(frozen=True)
class PrefillCost:
    """Seconds to compute one prompt token, and where that figure comes from."""

    seconds_per_token: float
    source: str


def prefill_cost(
    con: duckdb.DuckDBPyConnection, tokens_per_s: float | None, cost_run: str | None
) -> PrefillCost:
    """The prefill cost to weigh fetches against (see the module docstring)."""
    if tokens_per_s is not None:
        if not (tokens_per_s > 0 and math.isfinite(tokens_per_s)):
            raise InputError(f"the prefill rate must be a positive number, got {tokens_per_s}")
        return PrefillCost(1 / tokens_per_s, f"--prefill-tok-s {tokens_per_s:g}")
    fitted = [
        row
        for row in cost_model_rows(con, "batches")
        if row["per_prefill_token_s"] is not None and row["per_prefill_token_s"] > 0
    ]
    if cost_run is not None:
        named = {
            run_id
            for (run_id,) in con.sql(
                "SELECT run_id FROM runs_named([$name])", params={"name": cost_run}
            ).fetchall()
        }
        fitted = [row for row in fitted if row["run_id"] in named]
        if not fitted:
            raise InputError(f"run {cost_run} has no batch timings with a prefill cost")
    if len(fitted) > 1:
        runs = ", ".join(row["run_id"] for row in fitted)
        raise InputError(
            f"several runs have batch timings ({runs}): choose one with --cost-run, or give "
            "--prefill-tok-s"
        )
    if fitted:
        row = fitted[0]
        return PrefillCost(
            row["per_prefill_token_s"], f"timing_cost_model('batches') of {row['run_id']}"
        )
    return PrefillCost(
        1 / DEEPSEEK_PREFILL_TOK_S,
        f"DeepSeek V3/R1 serving's published {DEEPSEEK_PREFILL_TOK_S:,.0f} prefill tokens/s "
        "per H800 node",
    )


def boundary_tokens(tier: Tier, bytes_per_token: float, cost: PrefillCost) -> int | None:
    """The fewest prefix tokens whose fetch from ``tier`` beats recomputing them; None
    when fetching never wins.  ``bytes_per_token`` covers every layer."""
    transfer = bytes_per_token / (tier.gbps * 1e9)
    gain = cost.seconds_per_token - transfer
    if gain <= 0:
        return None
    return math.floor(tier.latency_us / 1e6 / gain) + 1


def fetch_us(tier_items: np.ndarray, tiers: list[Tier], item_bytes: int) -> float:
    """Time to read items from tiers (``tier_items[k]`` from tier k), one batched read
    per tier, the tiers at once: the slowest tier's latency + bytes / bandwidth."""
    times = [
        tier.latency_us + items * item_bytes / (tier.gbps * 1e9) * 1e6
        for tier, items in zip(tiers, tier_items.tolist(), strict=True)
        if items
    ]
    return max(times, default=0.0)
