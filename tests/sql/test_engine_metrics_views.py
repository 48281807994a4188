"""The engine-metrics views against hand-worked rows: counter increases with a reset
(Prometheus' increase() semantics), per-run totals and rates, and histogram quantiles
computed as Prometheus' histogram_quantile does (promql/quantile.go, bucketQuantile)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from kvtrace import connect
from kvtrace.warehouse import Warehouse

START = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)
HITS = "vllm:prefix_cache_hits_total"
LATENCY = "vllm:e2e_request_latency_seconds"


def sample(
    t: float,
    metric: str,
    value: float | None,
    *,
    kind: str = "counter",
    family: str | None = None,
    labels: dict[str, str] | None = None,
    worker: str = "gpu0",
) -> dict:
    return {
        "run_id": "r",
        "experiment": "r",
        "worker_id": worker,
        "ts": START + timedelta(seconds=t),
        "t_s": t,
        "metric": metric,
        "family": family or metric.removesuffix("_total"),
        "labels": json.dumps(labels or {}, sort_keys=True, separators=(",", ":")),
        "value": value,
        "type": kind,
    }


def store(warehouse: Warehouse, rows: list[dict]) -> None:
    with warehouse.transaction("r", operation="collect") as commit:
        warehouse.write_rows(commit, "engine_metrics", rows)


def buckets(t: float, counts: dict[str, float], **labels: str) -> list[dict]:
    """One scrape of the latency histogram's buckets (le -> cumulative count)."""
    return [
        sample(
            t,
            f"{LATENCY}_bucket",
            count,
            kind="histogram",
            family=LATENCY,
            labels={**labels, "le": le},
        )
        for le, count in counts.items()
    ]


def test_counter_deltas_take_a_drop_as_a_reset_and_start_each_series_with_null(warehouse):
    # hits read 100, 130, 130, 20, 50 at t = 0..4 s: the engine restarted between 2 and
    # 3 s, so the increase at 3 s is the new value, 20 (not 20 - 130)
    rows = [sample(t, HITS, v) for t, v in enumerate([100.0, 130.0, 130.0, 20.0, 50.0])]
    rows.append(sample(2.5, HITS, None))  # a NaN scrape (stored NULL) is passed over
    rows += [sample(t, HITS, v, worker="gpu1") for t, v in [(0, 7.0), (2, 9.0)]]
    rows.append(sample(1, "vllm:num_requests_running", 3.0, kind="gauge"))
    store(warehouse, rows)
    got = connect(warehouse).execute(
        "SELECT worker_id, t_s, previous_value, interval_s, delta, reset, rate_per_s "
        "FROM engine_counter_deltas ORDER BY worker_id, t_s"
    )
    assert got.fetchall() == [
        ("gpu0", 0.0, None, None, None, None, None),
        ("gpu0", 1.0, 100.0, 1.0, 30.0, False, 30.0),
        ("gpu0", 2.0, 130.0, 1.0, 0.0, False, 0.0),
        ("gpu0", 3.0, 130.0, 1.0, 20.0, True, 20.0),
        ("gpu0", 4.0, 20.0, 1.0, 30.0, False, 30.0),
        ("gpu1", 0.0, None, None, None, None, None),
        ("gpu1", 2.0, 7.0, 2.0, 2.0, False, 1.0),
    ]


def test_counter_totals_sum_the_increases_over_the_run(warehouse):
    rows = [sample(t, HITS, v) for t, v in enumerate([100.0, 130.0, 130.0, 20.0, 50.0])]
    rows += [sample(0, HITS, 5.0, labels={"engine": "1"})]  # one scrape: no increase
    store(warehouse, rows)
    got = connect(warehouse).execute(
        "SELECT labels, scrapes, first_value, last_value, resets, increase, duration_s, "
        "rate_per_s FROM engine_counter_totals ORDER BY labels"
    )
    # 30 + 0 + 20 + 30 = 80 over 4 s
    assert got.fetchall() == [
        ('{"engine":"1"}', 1, 5.0, 5.0, 0, None, 0.0, None),
        ("{}", 5, 100.0, 50.0, 1, 80.0, 4.0, 20.0),
    ]


def test_histogram_and_summary_cumulative_series_are_counters_but_quantiles_are_not(warehouse):
    summary = "rpc_duration_seconds"
    store(
        warehouse,
        [
            *(
                sample(t, name, v, kind="summary", family=summary, labels=labels)
                for t, v in [(0, 1.0), (1, 3.0)]
                for name, labels in [
                    (summary, {"quantile": "0.5"}),
                    (f"{summary}_count", {}),
                    (f"{summary}_sum", {}),
                ]
            ),
            *buckets(0, {"+Inf": 1.0}),
            *buckets(1, {"+Inf": 4.0}),
        ],
    )
    got = connect(warehouse).execute(
        "SELECT DISTINCT metric FROM engine_counter_deltas ORDER BY metric"
    )
    assert [row[0] for row in got.fetchall()] == [
        f"{summary}_count",
        f"{summary}_sum",
        f"{LATENCY}_bucket",
    ]


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        # the window's increases: le=0.1: 10, 0.5: 30, 1: 36, +Inf: 40 (40 observations)
        # rank 20: bucket (0.1, 0.5] holds 20, the rank is its 10th: 0.1 + 0.4 x 10/20
        (0.5, 0.3),
        # rank 36: bucket (0.5, 1] holds 6, the rank is its 6th: 0.5 + 0.5 x 6/6
        (0.9, 1.0),
        # rank 38 is past every finite bucket: the highest finite bound
        (0.95, 1.0),
        # rank 4: the lowest bucket, from 0: 0.1 x 4/10
        (0.1, 0.04),
        # outside [0, 1]: no quantile
        (1.5, None),
    ],
)
def test_histogram_quantile_interpolates_inside_the_bucket_of_the_rank(warehouse, q, expected):
    store(
        warehouse,
        [
            *buckets(0, {"0.1": 5.0, "0.5": 5.0, "1": 5.0, "+Inf": 5.0}),
            *buckets(30, {"0.1": 15.0, "0.5": 35.0, "1": 41.0, "+Inf": 45.0}),
        ],
    )
    got = connect(warehouse).execute(
        f"SELECT t_s, observations, quantile_value FROM engine_histogram_quantiles(q := {q})"
    )
    ((t_s, observations, value),) = got.fetchall()
    assert (t_s, observations) == (0.0, 40.0)
    assert value == pytest.approx(expected) if expected is not None else value is None


def test_histogram_quantiles_per_window_with_a_reset_and_an_idle_window(warehouse):
    store(
        warehouse,
        [
            *buckets(0, {"0.1": 5.0, "0.5": 5.0, "1": 5.0, "+Inf": 5.0}),
            *buckets(30, {"0.1": 15.0, "0.5": 35.0, "1": 41.0, "+Inf": 45.0}),
            # window [60, 120): nothing observed by 60 s, then the engine restarted and
            # observed 2 requests under 0.1 s and 2 in (0.1, 0.5]
            *buckets(60, {"0.1": 15.0, "0.5": 35.0, "1": 41.0, "+Inf": 45.0}),
            *buckets(90, {"0.1": 2.0, "0.5": 4.0, "1": 4.0, "+Inf": 4.0}),
            # window [120, 180): no observations at all
            *buckets(130, {"0.1": 2.0, "0.5": 4.0, "1": 4.0, "+Inf": 4.0}),
        ],
    )
    got = connect(warehouse).execute(
        "SELECT t_s, window_s, observations, quantile_value "
        "FROM engine_histogram_quantiles(q := 0.5, window_s := 60)"
    )
    # window 1: increases 2, 4, 4, 4; rank 2 falls in the lowest bucket: 0.1 x 2/2
    assert got.fetchall() == [
        (0.0, 60.0, 40.0, pytest.approx(0.3)),
        (60.0, 60.0, 4.0, pytest.approx(0.1)),
        (120.0, 60.0, 0.0, None),
    ]


def test_histogram_quantile_edge_cases_follow_prometheus(warehouse):
    store(
        warehouse,
        [
            # a bucket decreasing across bounds (the 0.5 bucket grew by 8 < 10) is
            # flattened to 10: rank 10 of 20 is reached in the lowest bucket, 0.1 x 10/10
            *buckets(0, {"0.1": 0.0, "0.5": 0.0, "+Inf": 0.0}, path="flattened"),
            *buckets(10, {"0.1": 10.0, "0.5": 8.0, "+Inf": 20.0}, path="flattened"),
            # a lowest bound at or below 0 is the answer for a rank inside it
            *buckets(0, {"-1": 0.0, "0": 0.0, "+Inf": 0.0}, path="negative"),
            *buckets(10, {"-1": 2.0, "0": 2.0, "+Inf": 4.0}, path="negative"),
            # no +Inf bucket: no quantile
            *buckets(0, {"0.1": 0.0, "0.5": 0.0}, path="no-inf"),
            *buckets(10, {"0.1": 1.0, "0.5": 2.0}, path="no-inf"),
        ],
    )
    got = connect(warehouse).execute(
        "SELECT labels->>'path', quantile_value FROM engine_histogram_quantiles(q := 0.5) "
        "ORDER BY 1"
    )
    assert got.fetchall() == [
        ("flattened", pytest.approx(0.1)),
        ("negative", -1.0),
        ("no-inf", None),
    ]
