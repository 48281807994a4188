"""The rows of one simulated (run, block size) of the tier what-if: per tier, per run, per
second of the stream, per request and per replicated tier, from the run's curve and the
tiers' latency and bandwidth (`kvtrace.analysis.kv_access.whatif` gathers them into its
tables)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kvtrace.analysis.kv_access.curves import RunCurve, capacity_for
from kvtrace.analysis.kv_access.plan import RunPlan
from kvtrace.analysis.kv_access.recompute import PrefillCost, boundary_tokens, fetch_us

if TYPE_CHECKING:
    from kvtrace.analysis.kv_access.whatif import WhatIfSpec

HIT_TARGETS = (0.90, 0.95, 0.99)  # the hit rates whose HBM capacity a run row names


def _percentiles(values: np.ndarray, quantiles: Sequence[float]) -> list[float | None]:
    """Linear percentiles (numpy's default); None when there are no values."""
    if len(values) == 0:
        return [None] * len(quantiles)
    return [float(v) for v in np.percentile(values, list(quantiles))]


class RunFigures:
    """The rows of one (run, block size) from its curve."""

    def __init__(self, curve: RunCurve, spec: WhatIfSpec, block_size: int, cost: PrefillCost):
        self.curve, self.spec, self.cost, self.block_size = curve, spec, cost, block_size
        self.plan: RunPlan = curve.plan
        self.tiers = list(spec.tiers)
        layers = len(self.plan.layers)
        per_item = layers if spec.granularity == "block" else 1
        self.item_bytes = block_size * spec.bytes_per_token * per_item
        self.token_bytes = spec.bytes_per_token * layers  # one token, every traced layer
        counts = curve.outcome.slot_levels
        self.counts = counts[counts.sum(axis=1) > 0]  # the slots that read anything
        self.fetch = self._fetch(self.counts)
        self.requests = self._request_rows()

    def _fetch(self, counts: np.ndarray) -> np.ndarray:
        """Per step and tier: latency plus transfer time, 0 where nothing is read."""
        latency = np.array([t.latency_us for t in self.tiers])
        bandwidth = np.array([t.gbps for t in self.tiers]) * 1e9
        result: np.ndarray = np.where(
            counts > 0, latency + counts * self.item_bytes / bandwidth * 1e6, 0.0
        )
        return result

    def tables(self) -> dict[str, list[dict[str, Any]]]:
        """The rows of each what-if table (`kvtrace.analysis.kv_access.whatif.TABLES`)."""
        return {
            "tiers": self.tier_rows(),
            "runs": [self.run_row()],
            "seconds": self.second_rows(),
            "requests": self.request_rows(),
            "replicas": self.replica_rows(),
            "packing": self.packing_rows(),
        }

    def tier_rows(self) -> list[dict[str, Any]]:
        rows = []
        shared = self.curve.outcome.shared_levels
        for index, tier in enumerate(self.tiers):
            column = self.counts[:, index]
            served = int(column.sum())
            p50, p95 = _percentiles(column * self.item_bytes, (50, 95))
            f50, f95, f99 = _percentiles(self.fetch[:, index], (50, 95, 99))
            rows.append(
                {
                    "tier": tier.name,
                    "capacity_blocks": tier.capacity,
                    "accesses_served": served,
                    "shared_served": int(shared[index]),
                    "hit_rate": served / self.curve.accesses if self.curve.accesses else None,
                    "bytes_total": served * self.item_bytes,
                    "bytes_per_step_p50": None if p50 is None else round(p50),
                    "bytes_per_step_p95": None if p95 is None else round(p95),
                    "fetch_us_p50": f50,
                    "fetch_us_p95": f95,
                    "fetch_us_p99": f99,
                    "recompute_boundary_tokens": boundary_tokens(tier, self.token_bytes, self.cost),
                }
            )
        return rows

    def run_row(self) -> dict[str, Any]:
        step_fetch = self.fetch.max(axis=1, initial=0.0)
        f50, f95, f99 = _percentiles(step_fetch, (50, 95, 99))
        saved = np.array([row["ttft_saved_us"] for row in self.requests]) / 1000
        reused = sum(row["reused_tokens"] for row in self.requests)
        shared = self.curve.outcome.shared_levels
        return {
            "stream_order": self.plan.order,
            "sharing_rule": _rule_text(self.plan.rules),
            "requests": len(self.plan.requests),
            "steps": len(self.counts),
            "accesses": self.curve.accesses,
            "first_touches": self.curve.first_touches,
            "shared_hits": int(shared[:-1].sum()),
            "bytes_per_step_p50": (
                None
                if len(self.counts) == 0
                else round(float(np.percentile(self.counts.sum(axis=1) * self.item_bytes, 50)))
            ),
            "fetch_us_p50": f50,
            "fetch_us_p95": f95,
            "fetch_us_p99": f99,
            **{
                f"hbm_blocks_for_{round(t * 100)}pct": capacity_for(self.curve, t)
                for t in HIT_TARGETS
            },
            "prefill_source": self.cost.source,
            "reused_prompt_tokens": reused,
            "ttft_saved_ms_mean": float(saved.mean()) if len(saved) else None,
            "ttft_saved_ms_p50": _percentiles(saved, (50,))[0],
            "ttft_saved_ms_max": float(saved.max()) if len(saved) else None,
            "window_tokens": (
                self.spec.window_tokens if self.spec.policy == "sliding_window" else None
            ),
        }

    def second_rows(self) -> list[dict[str, Any]]:
        """Per second of the stream's time and tier: steps, accesses, bytes, fetch time,
        and the items touched that second (the pool's working set)."""
        seconds = self.plan.slot_seconds
        outcome = self.curve.outcome
        if seconds is None or outcome.second_items is None:
            return []
        start = seconds.min(initial=0)
        counts = outcome.slot_levels
        reading = counts.sum(axis=1) > 0
        second_of = np.floor(seconds - start).astype(np.int64)[reading]
        counts = counts[reading]
        fetch = self._fetch(counts)
        rows = []
        for second in np.unique(second_of).tolist():
            at = second_of == second
            for index, tier in enumerate(self.tiers):
                f50, f99 = _percentiles(fetch[at, index], (50, 99))
                served = int(counts[at, index].sum())
                rows.append(
                    {
                        "second": second,
                        "tier": tier.name,
                        "steps": int(at.sum()),
                        "accesses_served": served,
                        "bytes": served * self.item_bytes,
                        "fetch_us_p50": f50,
                        "fetch_us_p99": f99,
                        "working_set": int(outcome.second_items[second]),
                    }
                )
        return rows

    def _request_rows(self) -> list[dict[str, Any]]:
        """Per request: the prompt tokens it found in the pool and the TTFT they save."""
        plan = self.plan
        probes = {p.request: p for p in self.curve.outcome.probes}
        seconds = plan.slot_seconds
        rows = []
        for index, request_id in enumerate(plan.requests.tolist()):
            probe = probes.get(index)
            tokens = 0 if probe is None else probe.blocks * self.block_size
            fetch = (
                0.0 if probe is None else fetch_us(probe.tier_items, self.tiers, self.item_bytes)
            )
            recompute = tokens * self.cost.seconds_per_token * 1e6
            arrival = int(plan.arrival_slot[index])
            rows.append(
                {
                    "request_id": request_id,
                    "arrival_s": None
                    if seconds is None
                    else float(seconds[arrival] - seconds.min()),
                    "prompt_tokens": int(plan.prompt_tokens[index]),
                    "reused_tokens": tokens,
                    "fetch_us": fetch,
                    "recompute_us": recompute,
                    "ttft_saved_us": max(0.0, recompute - fetch),
                }
            )
        return rows

    def request_rows(self) -> list[dict[str, Any]]:
        return self.requests

    def replica_rows(self) -> list[dict[str, Any]]:
        rows = []
        for name, copies in self.spec.replicas:
            index = self.spec.tier_index(name)
            blocks, moved = self.curve.outcome.replicated.get(index, (0, 0))
            saved = moved * self.item_bytes
            copy_bytes = blocks * copies * self.item_bytes
            rows.append(
                {
                    "tier": name,
                    "copies": copies,
                    "replicated_blocks": blocks,
                    "reads_moved": moved,
                    "bytes_saved": saved,
                    "copy_bytes": copy_bytes,
                    "net_bytes_saved": saved - copy_bytes,
                }
            )
        return rows

    def packing_rows(self) -> list[dict[str, Any]]:
        """Per tier and sub-block size: the bytes of the whole blocks the tier served and
        of the sub-blocks its accesses touched."""
        packing = self.curve.outcome.packing
        if packing is None:
            return []
        served = self.curve.outcome.slot_levels.sum(axis=0)
        rows = []
        for index, tier in enumerate(self.tiers):
            whole = int(served[index]) * self.item_bytes
            for j, size in enumerate(self.spec.subblocks):
                fetched = int(packing[index, j]) * self.spec.bytes_per_token
                rows.append(
                    {
                        "tier": tier.name,
                        "subblock_tokens": size,
                        "accesses_served": int(served[index]),
                        "bytes_whole_blocks": whole,
                        "bytes_subblocks": fetched,
                        "fetched_share": fetched / whole if whole else None,
                    }
                )
        return rows


def _rule_text(rules: dict[str, int]) -> str:
    """How a run's blocks were named: the rule, or the rules with their request counts."""
    if len(rules) == 1:
        return next(iter(rules))
    return ", ".join(f"{rule} ({n} requests)" for rule, n in sorted(rules.items()))
