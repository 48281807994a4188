"""The serving study's decile table (seed 001, section 4.1), reproduced.

Its 4449 requests and 415 errors gave, with equal-time bins, a last decile of 245
requests at 16.7 % errors, read as a "recovery"; equal-count bins put that decile at
24.5 %, as high as deciles 8 and 9.  The fixture below is a replay whose arrivals and
failures give exactly the published counts under both binnings.
"""

from __future__ import annotations

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.serving.fixtures import write

TIME_REQUESTS = [567, 268, 517, 189, 662, 417, 486, 612, 486, 245]
TIME_ERRORS = [0, 0, 0, 0, 3, 27, 39, 177, 128, 41]
COUNT_ERRORS = [0, 0, 0, 0, 3, 28, 42, 114, 119, 109]


def seed_replay() -> list[dict]:
    """Arrivals spread evenly inside ten 10-second bins; failures placed so that both
    the equal-time and the equal-count error counts are the published ones."""
    arrivals = []
    for k, count in enumerate(TIME_REQUESTS):
        last = k == len(TIME_REQUESTS) - 1  # the final arrival closes the span at 100 s
        arrivals += [10 * k + 10 * j / (count - 1 if last else count) for j in range(count)]
    total = len(arrivals)
    time_bin = [k for k, count in enumerate(TIME_REQUESTS) for _ in range(count)]
    sizes = [total // 10 + (i < total % 10) for i in range(10)]  # ntile(10)
    count_bin = [k for k, size in enumerate(sizes) for _ in range(size)]
    need_time, need_count = list(TIME_ERRORS), list(COUNT_ERRORS)
    failed = [False] * total
    start = 0
    while start < total:  # fill each (time bin, count bin) segment greedily
        end = start
        while end < total and (time_bin[end], count_bin[end]) == (
            time_bin[start],
            count_bin[start],
        ):
            end += 1
        t, c = time_bin[start], count_bin[start]
        errors = min(end - start, need_time[t], need_count[c])
        failed[start : start + errors] = [True] * errors
        need_time[t] -= errors
        need_count[c] -= errors
        start = end
    assert not any(need_time) and not any(need_count)
    return [
        {
            "request_id": f"r{i:05d}",
            "session_id": f"s{i % 52}",
            "arrival_s": arrival,
            "execution_mode": "kvcache-centric" if bad else "direct-to-D",
            "status": "error" if bad else "ok",
            "latency_s": 1.0,
        }
        for i, (arrival, bad) in enumerate(zip(arrivals, failed, strict=True))
    ]


def test_the_seeds_small_last_bin_is_no_recovery(warehouse, tmp_path):
    ingest(warehouse, [str(write(tmp_path / "exp2_2p6d_metrics.jsonl", seed_replay()))])
    rows = (
        connect(warehouse)
        .execute(
            "SELECT equal_time_requests, equal_time_errors, equal_time_error_rate, "
            "equal_count_requests, equal_count_errors, equal_count_error_rate "
            "FROM request_error_deciles ORDER BY decile"
        )
        .fetchall()
    )
    assert [r[0] for r in rows] == TIME_REQUESTS
    assert [r[1] for r in rows] == TIME_ERRORS
    assert [r[4] for r in rows] == COUNT_ERRORS
    assert [r[3] for r in rows] == [445] * 9 + [444]  # ntile: larger bins first
    last = rows[-1]
    assert f"{last[2]:.1%}" == "16.7%"  # the equal-time "recovery"
    assert f"{last[5]:.1%}" == "24.5%"  # the equal-count truth, level with deciles 8-9
    assert f"{rows[7][5]:.1%}" == "25.6%" and f"{rows[8][5]:.1%}" == "26.7%"
