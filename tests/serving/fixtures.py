"""Serving traces shaped like the seed's replay: decode workers, a stuck stretch, errors
clustered in a few sessions, the breakdown fields only in later ticks."""

from __future__ import annotations

import json
from pathlib import Path

CAPACITY = 92086
WORKERS = ("decode-0", "decode-1", "decode-2")
BREAKDOWN = (
    "radix_protected_tokens",
    "running_batch_tokens",
    "inflight_transfer_tokens",
    "prealloc_tokens",
    "retracted_tokens",
)


def pool_rows(ticks: int = 100) -> list[dict]:
    rows = []
    for t in range(ticks):
        rows.append(
            {
                "worker_id": "prefill-0",
                "worker_role": "prefill",
                "t": float(t),
                "capacity_tokens": CAPACITY,
                "held_tokens": 0,
                "available_tokens": CAPACITY - 1000 * (t % 7),
                "session_count": 0,
            }
        )
        for w, worker in enumerate(WORKERS):
            held = (t * 977 * (w + 1)) % 60000
            available = (t * 1231 + 5000 * w) % (CAPACITY - held)
            sessions = 1 + (t + w) % 3
            if worker == "decode-1" and 40 <= t < 52:  # stuck: nothing visible holds it
                held, available, sessions = 0, 20000 - 100 * (t - 40), 0
            row = {
                "worker_id": worker,
                "worker_role": "decode",
                "t": float(t),
                "capacity_tokens": CAPACITY,
                "held_tokens": held,
                "available_tokens": available,
                "session_count": sessions,
                "resident_session_count": sessions,
                "kvcache_mem_gb": 10.5,
                "sessions": [{"sid": f"s{w}", "len": held}],
            }
            if worker == "decode-2" and t >= 50:  # newer server: breakdown fields
                other = CAPACITY - held - available
                row.update({name: other // 10 for name in BREAKDOWN})
                if t == 60:
                    del row["retracted_tokens"]  # one component missing
            if worker == "decode-0" and t == 30:
                row = {
                    "worker_id": worker,
                    "worker_role": "decode",
                    "t": float(t),
                    "poll_error": "ReadTimeout: 0.5 s",
                }
            rows.append(row)
    return rows


def request_rows() -> list[dict]:
    """100 requests; arrivals thin out at the end; errors late, in sessions 3 and 7."""
    rows = []
    for i in range(100):
        arrival = i * 0.9 if i < 95 else 85.5 + (i - 94) * 2.5  # sparse tail
        session = i % 10
        failed = session in (3, 7) and arrival >= 50
        rows.append(
            {
                "request_id": f"r{i}",
                "session_id": f"sess-{session}",
                "turn_id": i // 10,
                "prefill_worker": "prefill-0",
                "decode_worker": WORKERS[session % 3],
                "execution_mode": (
                    "kvcache-centric" if failed else "direct-to-D" if i % 2 else "session-cap-fb"
                ),
                "status": "failed" if failed else "ok",
                "error_type": "RuntimeError" if failed else None,
                "kv_transfer_blocks": 5,
                "session_reused": not failed,
                "input_tokens": 1000 + i,
                "output_tokens": 50,
                "arrival_s": arrival,
                "ttft_s": 0.1 + i / 1000,
                "latency_s": 1.0 + (i % 13) / 4,
            }
        )
    return rows


def write(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path
