"""Write synthetic DSA traces in the tracer's JSONL layout (seed format).

The selections imitate what DSA top-k traces show: an attention sink at the start, a
dense recency window, a few salient segments per request that persist across steps, and
a long tail drawn with probability falling off with distance.  The data are synthetic
and labelled so (dataset ``synthetic-*``); they serve the demo, tests and benchmarks, and
are never a result about a real model.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import numpy as np

PREFIX_TOKENS = 256


def dsa_selection(
    rng: np.random.Generator, seq_len: int, topk: int, layer: int, segments: list[tuple[int, int]]
) -> np.ndarray:
    """One synthetic top-k selection (unordered positions) at ``seq_len`` for ``layer``;
    ``segments`` are the request's salient (start, length) spans."""
    k = min(topk, seq_len)
    window = min(seq_len, 64 + 32 * (layer % 8))
    chosen = [np.arange(min(4, seq_len)), np.arange(seq_len - window, seq_len)]
    for start, length in segments[: 1 + layer % len(segments)]:
        chosen.append(np.arange(start, min(start + length, seq_len)))
    picked = np.unique(np.concatenate(chosen))[:k]
    if len(picked) < k:
        draws = np.minimum(rng.pareto(0.6, size=3 * k) * 64, seq_len)  # pareto can be inf
        offsets = np.floor(draws).astype(np.int64)
        tail = seq_len - 1 - offsets[offsets < seq_len]
        tail = np.setdiff1d(np.unique(tail), picked)
        need = k - len(picked)
        if len(tail) < need:
            rest = np.setdiff1d(np.arange(seq_len), np.concatenate([picked, tail]))
            tail = np.concatenate([tail, rng.choice(rest, need - len(tail), replace=False)])
        picked = np.concatenate([picked, rng.permutation(tail)[:need]])
    return rng.permutation(picked)


def _record(
    run_name: str,
    dataset: str,
    request_id: int,
    layer: int,
    step: int,
    positions: np.ndarray,
    block_size: int,
    prefix: dict,
    rng: np.random.Generator,
) -> dict:
    seq_len = step + 1
    ordered = np.sort(positions)
    offsets = seq_len - 1 - ordered
    blocks, per_block = np.unique(ordered // block_size, return_counts=True)
    total = -(-seq_len // block_size)
    cached = prefix["prefix_cached_blocks"]
    inter = blocks[blocks < cached].tolist()  # the seed intersects every row with its region
    scores = rng.normal(size=3)
    hbm = {
        "hit_blocks": blocks.tolist(),
        "bytes_read": int(len(blocks) * block_size * 656),
        "read_ops": 1,
        "latency_us": 400000 + 1000 * request_id,
        "batch_size": len(blocks),
    }
    empty = {"hit_blocks": [], "bytes_read": 0, "read_ops": 0, "latency_us": None, "batch_size": 0}
    return {
        "event": "dsa_topk",
        "run_name": run_name,
        "dataset": dataset,
        "rank": 0,
        "world_size": 1,
        "request_id": request_id,
        "layer_id": layer,
        "step_idx": step,
        "seq_len_current": seq_len,
        "unique_token_pos_count": len(positions),
        "offset_min": int(offsets.min()),
        "offset_p50": float(np.median(offsets)),
        "offset_max": int(offsets.max()),
        "block_size_tokens": block_size,
        "selected_block_ids": blocks.tolist(),
        "unique_blocks": len(blocks),
        "total_blocks_in_use": total,
        "touched_block_ratio": round(len(blocks) / total, 4),
        "tokens_per_touched_block": {
            "mean": round(float(per_block.mean()), 2),
            "p50": float(np.percentile(per_block, 50)),
            "p95": float(np.percentile(per_block, 95)),
        },
        "kv_fetch": {"hbm": hbm, "local_pool": empty, "remote_pool": dict(empty)},
        "prefix": {
            **prefix,
            "intersection_ratio": round(len(inter) / len(blocks), 4),
            "intersection_blocks": inter,
        },
        "selected_token_pos": positions.tolist(),
        "scores_stats": {
            "min": float(scores.min()),
            "mean": float(scores.mean()),
            "max": float(scores.max()),
        },
    }


def write_seed_trace(
    path: Path,
    *,
    requests: int = 4,
    steps: int = 8,
    layers: int = 61,
    topk: int = 2048,
    prompt_tokens: int = 3000,
    block_size: int = 64,
    run_name: str = "synthetic-run",
    dataset: str = "synthetic-ruler",
    seed: int = 0,
) -> int:
    """Write ``requests x steps x layers`` records to ``path`` (gzip if it ends in .gz).

    Requests come in pairs sharing their first 256 prompt tokens, so the second of each
    pair is a prefix-cache hit.  Returns the number of records written.
    """
    rng = np.random.default_rng(seed)
    opener = gzip.open if str(path).endswith(".gz") else open
    written = 0
    seen_prefixes: set[str] = set()
    with opener(path, "wt") as out:
        for request_id in range(requests):
            prompt = prompt_tokens + int(rng.integers(0, max(prompt_tokens // 4, 1)))
            key = hashlib.sha1(f"prefix-{request_id // 2}".encode()).hexdigest()
            prefix = {
                "prefix_cache_hit": key in seen_prefixes,
                "prefix_cached_blocks": PREFIX_TOKENS // block_size,
                "prefix_key": key,
            }
            seen_prefixes.add(key)
            segments = [
                (int(rng.integers(0, prompt)), int(rng.integers(16, 200))) for _ in range(4)
            ]
            for step in range(prompt, prompt + steps):
                for layer in range(layers):
                    positions = dsa_selection(rng, step + 1, topk, layer, segments)
                    record = _record(
                        run_name,
                        dataset,
                        request_id,
                        layer,
                        step,
                        positions,
                        block_size,
                        prefix,
                        rng,
                    )
                    out.write(json.dumps(record, separators=(",", ":")) + "\n")
                    written += 1
    return written
