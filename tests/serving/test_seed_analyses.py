"""The pool and serving analyses of seed 001_*, on data where a looser definition would
give another answer; every expectation is worked out in plain Python."""

from __future__ import annotations

import itertools
import statistics

import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.serving.fixtures import CAPACITY, write


def _tick(
    worker: str,
    t: float,
    other: int,
    *,
    role: str = "decode",
    held: int = 1000,
    sessions: int = 1,
    throughput: float | None = None,
) -> dict:
    row = {
        "worker_id": worker,
        "worker_role": role,
        "t": t,
        "capacity_tokens": CAPACITY,
        "held_tokens": held,
        "available_tokens": CAPACITY - held - other,
        "session_count": sessions,
    }
    if throughput is not None:
        row["last_gen_throughput"] = throughput
    return row


def _irregular() -> list[dict]:
    """decode-0: 1 s ticks of other 10K, a stretch of 4 s ticks (the poller backing off)
    of other 80K, then 1 s ticks again; prefill-0 holds 40K with held = 0 throughout."""
    rows, t = [], 0.0
    times = (
        [float(t) for t in range(20)] + [20.0, 24.0, 28.0, 32.0] + [float(t) for t in range(33, 41)]
    )
    for t in times:
        high = 20 <= t <= 32
        rows.append(
            _tick("decode-0", t, 80000 if high else 10000, throughput=50.0 if high else 200.0)
        )
        rows.append(_tick("prefill-0", t, 40000, role="prefill", held=0, sessions=0))
    return rows


@pytest.fixture
def irregular(warehouse, tmp_path):
    ingest(warehouse, [str(write(tmp_path / "irr_pool_timeseries.jsonl", _irregular()))])
    return connect(warehouse)


def _weights(times: list[float]) -> list[float]:
    gaps = [b - a for a, b in itertools.pairwise(times)]
    median = statistics.median(gaps)
    return [min(g, 2 * median) for g in gaps] + [median]


def test_time_weighted_shares_differ_from_tick_shares_on_irregular_ticks(irregular):
    rows = [r for r in _irregular() if r["worker_id"] == "decode-0"]
    weights = _weights([r["t"] for r in rows])
    above = [r["available_tokens"] < CAPACITY - 1000 - 70000 for r in rows]
    tick_share = sum(above) / len(rows)
    time_share = sum(w for w, a in zip(weights, above, strict=True) if a) / sum(weights)
    got = irregular.execute(
        "SELECT share, time_share FROM pool_threshold_freq(warmup_fraction := 0) "
        "WHERE worker_id = 'decode-0' AND measure = 'other_tokens' AND threshold = 70000"
    ).fetchone()
    assert got == pytest.approx((tick_share, time_share))
    assert tick_share == 4 / 32 and time_share == pytest.approx(7 / 35)  # 4 s gaps count 2


def test_time_weighted_percentiles_weigh_each_tick_by_its_time(irregular):
    rows = [r for r in _irregular() if r["worker_id"] == "decode-0"]
    weights = _weights([r["t"] for r in rows])
    others = [CAPACITY - r["held_tokens"] - r["available_tokens"] for r in rows]
    pairs = sorted(zip(others, weights, strict=True))
    total, running, p90 = sum(weights), 0.0, None
    for value, weight in pairs:
        running += weight
        if running / total >= 0.9:
            p90 = value
            break
    got = irregular.execute(
        "SELECT other_p90, other_time_p90 FROM "
        "pool_worker_stats(warmup_fraction := 0) "
        "WHERE worker_id = 'decode-0'"
    ).fetchone()
    assert got == (pytest.approx(statistics.quantiles(others, n=10, method="inclusive")[8]), p90)
    assert p90 == 80000 and got[0] < 80000  # by ticks the high stretch barely shows


def test_every_pool_statistic_drops_the_same_warmup(irregular):
    # with warm-up 0.6 only t >= 24 remains: the 80K ticks at 24, 28, 32 and 8 of 10K
    kept = [r for r in _irregular() if r["worker_id"] == "decode-0" and r["t"] >= 0.6 * 40]
    summary = irregular.execute(
        "SELECT decode_ticks, other_above_70k FROM pool_decode_summary(warmup_fraction := 0.6)"
    ).fetchone()
    assert summary == (len(kept), pytest.approx(3 / 11))
    freq = irregular.execute(
        "SELECT ticks FROM pool_threshold_freq(warmup_fraction := 0.6) WHERE worker_id = "
        "'decode-0' AND measure = 'held_tokens'"
    ).fetchone()
    assert freq == (len(kept),)


def test_stuck_stretches_are_of_decode_workers_unless_asked(irregular):
    default = irregular.execute("SELECT worker_id FROM pool_stuck_intervals()").fetchall()
    assert default == []  # prefill-0 reports held = 0 and no sessions all the time
    every = irregular.execute(
        "SELECT worker_id, ticks FROM pool_stuck_intervals(role := NULL, warmup_fraction := 0)"
    ).fetchall()
    assert every == [("prefill-0", 32)]


def test_throughput_is_shown_beside_the_pool_state(irregular):
    got = {
        state: (ticks, mean)
        for state, ticks, mean in irregular.execute(
            "SELECT state, ticks, throughput_mean FROM pool_throughput_by_state("
            "warmup_fraction := 0) WHERE worker_id = 'decode-0'"
        ).fetchall()
    }
    assert got == {"high_other": (4, 50.0), "normal": (28, 200.0)}


def _request(
    i: int,
    session: str,
    *,
    failed: bool,
    turn: int = 0,
    mode: str = "direct",
    arrival: float = 0.0,
    transfer: int = 5,
    reused: bool = False,
    error: str | None = "RuntimeError",
    truncated: bool = False,
) -> dict:
    return {
        "request_id": f"r{i}",
        "session_id": session,
        "turn_id": turn,
        "decode_worker": "decode-0",
        "execution_mode": mode,
        "status": "failed" if failed else "ok",
        "error_type": error if failed else None,
        "kv_transfer_blocks": transfer,
        "session_reused": reused,
        "input_tokens": 100 * (turn + 1),
        "arrival_s": arrival,
        "latency_s": 0.5,
        "truncated": truncated,
    }


def test_error_types_with_transfer_and_reuse_shares(warehouse, tmp_path):
    rows = [
        _request(0, "a", failed=True),
        _request(1, "a", failed=True, transfer=0),
        _request(2, "b", failed=True, error="ReadTimeout", reused=True),
        _request(3, "b", failed=False),
    ]
    ingest(warehouse, [str(write(tmp_path / "e_metrics.jsonl", rows))])
    got = (
        connect(warehouse)
        .execute(
            "SELECT error_type, errors, share_of_errors, with_kv_transfer, session_reused "
            "FROM request_error_types"
        )
        .fetchall()
    )
    assert got == [("RuntimeError", 2, 2 / 3, 1, 0), ("ReadTimeout", 1, 1 / 3, 1, 1)]


def test_sessions_sort_naturally_and_show_their_turn_profile(warehouse, tmp_path):
    rows = [
        _request(i, s, failed=s == "sess-9" and i == 3, turn=i)
        for i, s in enumerate(["sess-10", "sess-9", "sess-10", "sess-9", "sess-2"])
    ]
    ingest(warehouse, [str(write(tmp_path / "t_metrics.jsonl", rows))])
    con = connect(warehouse)
    order = [
        r[0]
        for r in con.execute(
            "SELECT session_id FROM request_session_errors WHERE errors = 0"
        ).fetchall()
    ]
    assert order == ["sess-2", "sess-10"]  # not 'sess-10' < 'sess-2' by characters
    profile = con.execute(
        "SELECT session_id, failing, requests, max_turn_id, "
        "first_error_turn FROM request_session_turns"
    ).fetchall()
    assert profile == [
        ("sess-9", True, 2, 3, 3),
        ("sess-2", False, 1, 4, None),
        ("sess-10", False, 2, 2, None),
    ]


def test_sessions_that_fail_in_every_rerun_are_marked(warehouse, tmp_path):
    for run, failing in enumerate((["s1", "s2"], ["s1"], ["s1", "s3"])):
        rows = [_request(i, s, failed=s in failing) for i, s in enumerate(["s1", "s2", "s3"])]
        ingest(
            warehouse, [str(write(tmp_path / f"run{run}_metrics.jsonl", rows))], experiment="exp2"
        )
    got = (
        connect(warehouse)
        .execute(
            "SELECT session_id, runs, runs_with_errors, fails_every_run "
            "FROM request_session_failure_recurrence"
        )
        .fetchall()
    )
    assert got == [("s1", 3, 3, True), ("s2", 3, 1, False), ("s3", 3, 1, False)]


def test_execution_modes_and_truncation_compared_between_experiments(warehouse, tmp_path):
    base = [
        _request(i, "s", failed=False, mode="direct" if i < 3 else "fallback", truncated=i == 0)
        for i in range(4)
    ]
    polled = [
        _request(i, "s", failed=False, mode="direct" if i < 1 else "fallback") for i in range(4)
    ]
    ingest(warehouse, [str(write(tmp_path / "base_metrics.jsonl", base))], experiment="base")
    ingest(warehouse, [str(write(tmp_path / "poll_metrics.jsonl", polled))], experiment="poll")
    got = {
        row[0]: row[1:]
        for row in connect(warehouse)
        .execute(
            "SELECT execution_mode, left_share, right_share, share_delta, single_run "
            "FROM request_execution_mode_compare('base', 'poll')"
        )
        .fetchall()
    }
    assert got["direct"] == pytest.approx((0.75, 0.25, -0.5, True))
    assert got["fallback"] == pytest.approx((0.25, 0.75, 0.5, True))
    assert got["truncated"] == pytest.approx((0.25, 0.0, -0.25, True))


def test_failures_join_pool_files_of_the_same_experiment_ingested_apart(warehouse, tmp_path):
    pool = [_tick("decode-0", float(t), 1000 * t) for t in range(10)]
    ingest(
        warehouse,
        [str(write(tmp_path / "pool_timeseries.jsonl", pool))],
        experiment="exp9",
        kind="pool",
    )
    requests = [
        _request(0, "s", failed=True, arrival=4.2),  # fails at 4.7: poll 4 fresh
        _request(1, "s", failed=True, arrival=12.0),
    ]  # at 12.5: poll 9 is 3.5 s old
    ingest(
        warehouse,
        [str(write(tmp_path / "req_metrics.jsonl", requests))],
        experiment="exp9",
        kind="requests",
    )
    got = (
        connect(warehouse)
        .execute(
            "SELECT request_id, snapshot_t_s, snapshot_age_s, other_tokens "
            "FROM request_errors_with_pool_state() ORDER BY request_id"
        )
        .fetchall()
    )
    assert got == [("r0", 4.0, pytest.approx(0.7), 4000), ("r1", 9.0, 3.5, None)]


def test_kv_fetch_tiers_are_totalled_per_run(warehouse):
    import numpy as np

    from kvtrace.collectors.dsa_tracer import DsaTracer
    from kvtrace.collectors.kv_tiers import LruTiers

    tracer = DsaTracer(
        warehouse,
        run_name="tiers",
        dataset="unit",
        block_sizes=(16,),
        tier_model=LruTiers(hbm_blocks=1, local_blocks=1, bytes_per_token=2),
    )
    tracer.begin_request(0, list(range(60)))
    for step, picks in enumerate(([0, 16], [0, 16, 32])):
        with tracer.step(60 + step):
            tracer.record_topk(0, np.array(picks))
    tracer.end_request(0)
    tracer.close()
    # stream 0, 1 | 0, 1, 2: distances -, -, 1, 1, -: HBM none, local 2, remote 3
    got = {
        tier: rest
        for tier, *rest in connect(warehouse)
        .execute("SELECT tier, blocks, bytes_read, block_share FROM dsa_kv_fetch")
        .fetchall()
    }
    assert got == {"hbm": [0, 0, 0.0], "local_pool": [2, 64, 0.4], "remote_pool": [3, 96, 0.6]}
