"""Serving views against values worked out in Python from the same fixture rows."""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.serving.fixtures import BREAKDOWN, CAPACITY, pool_rows, request_rows, write


@pytest.fixture
def serving(warehouse, tmp_path):
    pool = write(tmp_path / "exp2_2p6d_pool_timeseries.jsonl", pool_rows())
    metrics = write(tmp_path / "exp2_2p6d_metrics.jsonl", request_rows())
    report = ingest(warehouse, [str(pool), str(metrics)])
    assert [f.fmt for f in report.files] == ["pool", "requests"]
    return connect(warehouse)


def _other(row):
    if "capacity_tokens" not in row:
        return None
    return row["capacity_tokens"] - row["held_tokens"] - row["available_tokens"]


def test_pool_other_and_breakdown_never_read_a_missing_field_as_zero(serving):
    rows = {(r["worker_id"], r["t"]): r for r in pool_rows()}
    got = serving.execute("SELECT worker_id, t_s, other_tokens FROM pool_other").fetchall()
    assert {(w, t): o for w, t, o in got} == {k: _other(r) for k, r in rows.items()}
    breakdown = dict(
        serving.execute(
            "SELECT t_s, other_unaccounted_tokens FROM pool_other_breakdown "
            "WHERE worker_id = 'decode-2'"
        ).fetchall()
    )
    for t, value in breakdown.items():
        row = rows[("decode-2", t)]
        if t < 50 or t == 60:
            assert value is None, t
        else:
            assert value == _other(row) - sum(row[name] for name in BREAKDOWN)


def test_pool_worker_stats_drop_the_warmup_and_weight_by_time(serving):
    got = {
        row[0]: row[1:]
        for row in serving.execute(
            "SELECT worker_id, ticks, other_mean, other_p50, other_p90, other_max, held_mean, "
            "other_time_mean FROM pool_worker_stats(warmup_fraction := 0.2)"
        ).fetchall()
    }
    for worker in ("decode-0", "decode-1", "decode-2"):
        kept = [
            r
            for r in pool_rows()
            if r["worker_id"] == worker and r["t"] >= 0 + 0.2 * 99 and _other(r) is not None
        ]
        others = [_other(r) for r in kept]
        dts = [b["t"] - a["t"] for a, b in itertools.pairwise(kept)]
        median = statistics.median(dts)  # each tick weighs the time to the next, capped at
        weights = [min(d, 2 * median) for d in dts] + [median]  # 2 medians; the last: one
        time_mean = sum(o * w for o, w in zip(others, weights, strict=True)) / sum(weights)
        expected = (
            len(kept),
            statistics.mean(others),
            np.quantile(others, 0.5),
            np.quantile(others, 0.9),
            max(others),
            statistics.mean(r["held_tokens"] for r in kept),
            time_mean,
        )
        assert got[worker] == pytest.approx(expected)


def test_pool_threshold_freq_per_worker_and_per_role(serving):
    got = {
        (w, m, t): (n, above)
        for w, m, t, n, above in serving.execute(
            "SELECT worker_id, measure, threshold, ticks, ticks_above FROM "
            "pool_threshold_freq() WHERE worker_role = 'decode'"
        ).fetchall()
    }
    decode = [
        r
        for r in pool_rows()
        if r["worker_role"] == "decode" and _other(r) is not None and r["t"] >= 0.1 * 99
    ]  # the default warm-up drops the first tenth
    for worker in (None, "decode-0", "decode-1"):
        rows = [r for r in decode if worker in (None, r["worker_id"])]
        assert got[(worker, "other_tokens", 70000)] == (
            len(rows),
            sum(_other(r) > 70000 for r in rows),
        )
        assert got[(worker, "held_tokens", 60000)] == (
            len(rows),
            sum(r["held_tokens"] > 60000 for r in rows),
        )
        assert got[(worker, "other_fraction_of_capacity", 0.5)] == (
            len(rows),
            sum(_other(r) > 0.5 * CAPACITY for r in rows),
        )


def test_pool_stuck_intervals_find_the_stretch(serving):
    got = serving.execute(
        "SELECT worker_id, start_s, end_s, ticks, other_max FROM pool_stuck_intervals()"
    ).fetchall()
    stuck = [r for r in pool_rows() if r["worker_id"] == "decode-1" and 40 <= r["t"] < 52]
    assert ("decode-1", 40.0, 51.0, 12, max(_other(r) for r in stuck)) in got
    assert all(worker == "decode-1" or ticks < 12 for worker, _, _, ticks, _ in got)


def test_error_deciles_show_equal_time_and_equal_count_side_by_side(serving):
    rows = request_rows()
    arrivals = [r["arrival_s"] for r in rows]
    t0, t1 = min(arrivals), max(arrivals)
    by_time = [[0, 0] for _ in range(10)]
    for r in rows:
        b = min(math.floor((r["arrival_s"] - t0) / (t1 - t0) * 10), 9)
        by_time[b][0] += 1
        by_time[b][1] += r["status"] == "failed"
    ordered = sorted(rows, key=lambda r: (r["arrival_s"], r["request_id"]))
    by_count = [[0, 0] for _ in range(10)]
    for i, r in enumerate(ordered):
        by_count[i // 10][0] += 1
        by_count[i // 10][1] += r["status"] == "failed"
    got = serving.execute(
        "SELECT equal_time_requests, equal_time_errors, equal_count_requests, "
        "equal_count_errors FROM request_error_deciles ORDER BY decile"
    ).fetchall()
    assert got == [(*t, *c) for t, c in zip(by_time, by_count, strict=True)]
    # the seed's trap: the last equal-time bin is small and its rate looks like recovery
    assert by_time[9][0] < 10 and by_count[9][0] == 10


def test_worker_and_session_errors(serving):
    rows = request_rows()
    workers = dict(
        (w, (n, e))
        for w, n, e in serving.execute(
            "SELECT decode_worker, requests, errors FROM request_worker_error_rates"
        ).fetchall()
    )
    for worker in {r["decode_worker"] for r in rows}:
        mine = [r for r in rows if r["decode_worker"] == worker]
        assert workers[worker] == (len(mine), sum(r["status"] == "failed" for r in mine))
    top = serving.execute(
        "SELECT session_id, errors, pinned_worker FROM request_session_errors LIMIT 2"
    ).fetchall()
    expected = sorted(
        (
            (s, sum(r["status"] == "failed" for r in rows if r["session_id"] == s))
            for s in ("sess-3", "sess-7")
        ),
        key=lambda x: (-x[1], x[0]),
    )
    assert [(s, e) for s, e, _ in top] == expected
    assert [w for _, _, w in top] == [
        next(r["decode_worker"] for r in rows if r["session_id"] == s) for s, _ in expected
    ]


def test_mode_mix_and_latency_summary(serving):
    rows = request_rows()
    mix = dict(
        serving.execute("SELECT execution_mode, share FROM request_execution_mode_mix").fetchall()
    )
    for mode in {r["execution_mode"] for r in rows}:
        assert mix[mode] == pytest.approx(
            sum(r["execution_mode"] == mode for r in rows) / len(rows)
        )
    ok = [r["latency_s"] for r in rows if r["status"] == "ok"]
    got = serving.execute(
        "SELECT requests, latency_mean_s, latency_p50_s, latency_p99_s "
        "FROM request_latency_by_mode WHERE execution_mode IS NULL"
    ).fetchone()
    assert got == pytest.approx((len(ok), np.mean(ok), np.quantile(ok, 0.5), np.quantile(ok, 0.99)))


def test_errors_join_the_pool_snapshot_of_their_worker_at_that_moment(serving):
    pool = [r for r in pool_rows() if r["worker_role"] == "decode" and _other(r) is not None]
    got = serving.execute(
        "SELECT request_id, snapshot_t_s, snapshot_age_s, other_tokens "
        "FROM request_errors_with_pool_state()"
    ).fetchall()
    failed = [r for r in request_rows() if r["status"] == "failed"]
    assert len(got) == len(failed)
    by_id = {r["request_id"]: r for r in failed}
    for request_id, snapshot_t, age, other in got:
        r = by_id[request_id]
        moment = r["arrival_s"] + r["latency_s"]
        before = [p for p in pool if p["worker_id"] == r["decode_worker"] and p["t"] <= moment]
        latest = max(before, key=lambda p: p["t"])  # the last *successful* poll
        assert (snapshot_t, age) == pytest.approx((latest["t"], moment - latest["t"]))
        # polls come every second: one older than 2 s does not describe the failure
        assert other == (_other(latest) if moment - latest["t"] <= 2 else None)


def test_run_compare_counts_runs_and_flags_single_runs(warehouse, tmp_path):
    rows = request_rows()
    worse = [
        {**r, "status": "failed", "error_type": "X"} if i % 4 == 0 else r
        for i, r in enumerate(rows)
    ]
    for name, data, experiment in (
        ("a1_metrics", rows, "base"),
        ("a2_metrics", worse, "base"),
        ("b1_metrics", worse[::-1], "polling"),  # other bytes: a copy would add nothing
    ):
        ingest(warehouse, [str(write(tmp_path / f"{name}.jsonl", data))], experiment=experiment)
    con = connect(warehouse)
    got = {
        row[0]: row[1:]
        for row in con.execute(
            "SELECT metric, left_mean, left_runs, right_mean, right_runs, delta, single_run "
            "FROM run_compare('base', 'polling')"
        ).fetchall()
    }

    def rate(data):
        return sum(r["status"] == "failed" for r in data) / len(data)

    left = (rate(rows) + rate(worse)) / 2
    assert got["error_rate"] == pytest.approx((left, 2, rate(worse), 1, rate(worse) - left, True))
