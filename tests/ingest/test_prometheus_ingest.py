"""Saved Prometheus scrapes into engine_metrics: a text exposition file (the example of
Prometheus' exposition-format page, tests/data/prometheus/) and a JSONL of scrapes."""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path

from tests.conftest import DATA, query_rows

EXAMPLE = DATA / "prometheus" / "exposition_formats_example.prom"
NAME_TIME = datetime(2026, 11, 29, 4, 15, tzinfo=timezone.utc)  # the file name's time
COUNTER = "# TYPE vllm:prefix_cache_hits_total counter\n"


def ingest(cli, location: Path, *paths: Path, more: tuple[str, ...] = ()) -> tuple[int, str]:
    status, _, err = cli("-q", "-w", str(location), "ingest", *map(str, paths), *more)
    return status, err


def rows(location: Path, where: str = "TRUE") -> list[tuple]:
    return query_rows(
        str(location),
        "SELECT worker_id, ts, t_s, metric, family, labels, value, type FROM engine_metrics "
        f"WHERE {where} ORDER BY worker_id, ts, metric, labels",
    )


def test_an_exposition_file_gives_every_sample_at_its_time(cli, tmp_path):
    scrapes = tmp_path / "bench-1"
    scrapes.mkdir()
    shutil.copy(EXAMPLE, scrapes / "gpu0-20261129T041500Z.prom")
    assert ingest(cli, tmp_path / "wh", scrapes)[0] == 0
    got = rows(tmp_path / "wh")
    assert len(got) == 20  # every sample line of the example
    assert {row[0] for row in got} == {"gpu0"}
    by_series = {(row[3], row[5]): row for row in got}
    # a sample with its own timestamp keeps it (1395066363000 ms)
    requests = by_series["http_requests_total", '{"code":"200","method":"post"}']
    assert requests[1] == datetime(2014, 3, 17, 14, 26, 3, tzinfo=timezone.utc)
    assert requests[4:] == ("http_requests", '{"code":"200","method":"post"}', 1027.0, "counter")
    # +Inf is not a finite value: NULL, at its own timestamp before the epoch (-3982045 ms,
    # 1 h 6 min 22.045 s before it)
    weird = by_series["something_weird", '{"problem":"division by zero"}']
    assert weird[1] == datetime(1969, 12, 31, 22, 53, 37, 955000, tzinfo=timezone.utc)
    assert weird[6:] == (None, "unknown")
    # the others at the time in the file's name, t_s 0: the run's first scrape
    bucket = by_series["http_request_duration_seconds_bucket", '{"le":"+Inf"}']
    assert bucket[1:] == (
        NAME_TIME,
        0.0,
        "http_request_duration_seconds_bucket",
        "http_request_duration_seconds",
        '{"le":"+Inf"}',
        144320.0,
        "histogram",
    )
    escaped = by_series[
        "msdos_file_access_time_seconds",
        json.dumps(
            {"error": 'Cannot find file:\n"FILE.TXT"', "path": "C:\\DIR\\FILE.TXT"},
            sort_keys=True,
            separators=(",", ":"),
        ),
    ]
    assert escaped[6] == 1.458255915e9
    assert query_rows(str(tmp_path / "wh"), "SELECT run_name FROM runs") == [("bench-1",)]


def test_scrapes_of_one_folder_count_from_the_runs_first_scrape(cli, tmp_path):
    scrapes = tmp_path / "scrapes"
    scrapes.mkdir()
    (scrapes / "gpu0-20261129T041500Z.prom").write_text(
        COUNTER + "vllm:prefix_cache_hits_total 5\n"
    )
    (scrapes / "gpu0-20261129T041510Z.prom").write_text(
        COUNTER + "vllm:prefix_cache_hits_total 9\n"
    )
    untimed = scrapes / "gpu1.prom"  # no time in its name: its modification time
    untimed.write_text(COUNTER + "vllm:prefix_cache_hits_total 1\n")
    os.utime(untimed, (NAME_TIME.timestamp() + 4.5, NAME_TIME.timestamp() + 4.5))
    assert ingest(cli, tmp_path / "wh", scrapes)[0] == 0
    assert [(w, t, v) for w, _, t, *_, v, _ in rows(tmp_path / "wh")] == [
        ("gpu0", 0.0, 5.0),
        ("gpu0", 10.0, 9.0),
        ("gpu1", 4.5, 1.0),
    ]
    deltas = query_rows(str(tmp_path / "wh"), "SELECT delta FROM engine_counter_deltas")
    assert sorted(deltas, key=str) == [(4.0,), (None,), (None,)]


def test_a_series_repeated_in_one_exposition_keeps_its_first_sample(cli, tmp_path):
    path = tmp_path / "gpu0-20261129T041500Z.prom"
    path.write_text(
        COUNTER + 'vllm:prefix_cache_hits_total{engine="0"} 5\n'
        'vllm:prefix_cache_hits_total{engine="0"} 7\n'
        "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc NaN\n"
    )
    assert ingest(cli, tmp_path / "wh", path)[0] == 0
    assert [(m, v) for *_, m, _, _, v, _ in rows(tmp_path / "wh")] == [
        ("vllm:kv_cache_usage_perc", None),
        ("vllm:prefix_cache_hits_total", 5.0),
    ]


def test_text_that_is_not_an_exposition_is_one_sentence_and_stores_nothing(cli, tmp_path):
    path = tmp_path / "gpu0.prom"
    path.write_text(COUNTER + 'vllm:prefix_cache_hits_total{engine="0" 5\n')
    status, err = ingest(cli, tmp_path / "wh", path)
    assert status == 1
    assert err.strip().startswith(f"Error: {path}: not Prometheus text exposition format")
    assert len(err.strip().splitlines()) == 1


def scrape_line(t: float, worker: str, **fields) -> str:
    return json.dumps({"t": t, "worker": worker, **fields})


def test_a_jsonl_of_scrapes_keeps_the_good_lines_and_quarantines_the_rest(cli, tmp_path):
    t0 = NAME_TIME.timestamp()
    path = tmp_path / "bench-2.jsonl"
    path.write_text(
        "\n".join(
            [
                scrape_line(t0, "gpu0", body=COUNTER + "vllm:prefix_cache_hits_total 10\n"),
                scrape_line(t0 + 1, "gpu0", error="timeout after 0.5 s", duration_s=0.5),
                scrape_line(t0 + 2, "gpu0", body="vllm:x{ 1\n"),  # not an exposition
                scrape_line(t0 + 3, "gpu0", body=5),  # not text
                '{"t": "yesterday", "worker": "gpu0", "body": ""}',
                scrape_line(
                    t0 + 4,
                    "gpu0",
                    body=COUNTER + "vllm:prefix_cache_hits_total 16\n",
                    duration_s=0.01,
                ),
            ]
        )
        + "\n"
    )
    assert ingest(cli, tmp_path / "wh", path)[0] == 0
    got = [(t, m, labels, v) for _, _, t, m, _, labels, v, _ in rows(tmp_path / "wh")]
    assert got == [
        (0.0, "scrape_samples_scraped", "{}", 1.0),
        (0.0, "up", "{}", 1.0),
        (0.0, "vllm:prefix_cache_hits_total", "{}", 10.0),
        (1.0, "kvtrace_scrape_error", '{"error":"timeout after 0.5 s"}', 1.0),
        (1.0, "scrape_duration_seconds", "{}", 0.5),
        (1.0, "up", "{}", 0.0),
        (4.0, "scrape_duration_seconds", "{}", 0.01),
        (4.0, "scrape_samples_scraped", "{}", 1.0),
        (4.0, "up", "{}", 1.0),
        (4.0, "vllm:prefix_cache_hits_total", "{}", 16.0),
    ]
    quarantined = query_rows(
        str(tmp_path / "wh"), "SELECT line_no, reason FROM quarantine ORDER BY line_no"
    )
    assert [line for line, _ in quarantined] == [3, 4, 5]
    assert quarantined[0][1].startswith("not a saved scrape: not Prometheus text exposition")
    assert quarantined[1][1] == "not a saved scrape: body must be the exposition text, got a number"
    assert quarantined[2][1] == (
        "not a saved scrape: t must be a number of Unix seconds, got a string"
    )
    assert query_rows(str(tmp_path / "wh"), "SELECT run_name FROM runs") == [("bench-2",)]


def test_ingesting_the_same_scrapes_again_adds_nothing(cli, tmp_path):
    path = tmp_path / "gpu0-20261129T041500Z.prom"
    shutil.copy(EXAMPLE, path)
    assert ingest(cli, tmp_path / "wh", path)[0] == 0
    copy = tmp_path / "again" / path.name
    copy.parent.mkdir()
    copy.write_bytes(path.read_bytes() + b"\n# the same scrape, other bytes\n")
    assert ingest(cli, tmp_path / "wh", copy, more=("--run-name", "scrapes"))[0] == 0
    assert ingest(cli, tmp_path / "wh", path, more=("--run-name", "scrapes"))[0] == 0
    counts = query_rows(
        str(tmp_path / "wh"),
        "SELECT r.run_name, count(*) FROM engine_metrics JOIN runs r USING (run_id) "
        "GROUP BY ALL ORDER BY 1",
    )
    assert sorted(counts) == sorted([(tmp_path.name, 20), ("scrapes", 20)])


def test_an_openmetrics_scrape_keeps_its_counters_types(cli, tmp_path):
    # written by prometheus_client's own OpenMetrics exposition: the counter's samples are
    # requests_total and requests_created, and the body ends in "# EOF"
    from prometheus_client import CollectorRegistry, Counter
    from prometheus_client.openmetrics.exposition import generate_latest

    bodies = []
    registry = CollectorRegistry()
    served = Counter("requests", "Requests served", registry=registry)
    for count in (5, 3):  # the second scrape follows a restart: 3 since it
        served._value.set(count)
        bodies.append(generate_latest(registry).decode())
    assert bodies[0].rstrip().endswith("# EOF")
    saved = tmp_path / "om.jsonl"
    saved.write_text(
        "".join(
            json.dumps({"t": 1_796_000_000 + i, "worker": "w", "body": body}) + "\n"
            for i, body in enumerate(bodies)
        )
    )
    assert ingest(cli, tmp_path / "wh", saved)[0] == 0
    assert query_rows(
        str(tmp_path / "wh"),
        "SELECT t_s, metric, type, value, delta FROM engine_counter_deltas ORDER BY t_s",
    ) == [
        (0.0, "requests_total", "counter", 5.0, None),
        (1.0, "requests_total", "counter", 3.0, 3.0),
    ]
