"""``kvtrace collect metrics`` against real HTTP servers on loopback, driven by a fake
clock (no test waits for time to pass). The fake intervals are long so that each
scrape's real timeout (below the interval) holds however loaded the machine is.

The healthy endpoint serves what vLLM serves: a prometheus_client registry holding
metrics registered as vLLM's v1 Prometheus logger registers them
(vllm/v1/metrics/loggers.py: the ``vllm:prefix_cache_hits`` counter and the
``vllm:e2e_request_latency_seconds`` histogram with its request-latency buckets, labels
``model_name`` and ``engine``), rendered by prometheus_client's own exposition writer.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from kvtrace import connect
from kvtrace.collectors.metrics_scraper import Endpoint, ScrapeSpec, scrape_metrics
from kvtrace.errors import InputError
from tests.conftest import query_rows

START = 1_796_000_000.0  # the fake clock's Unix time at its start
LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0]
LATENCY_BUCKETS += [50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]


class FakeClock:
    """Time that passes only when the scraper waits."""

    def __init__(self) -> None:
        self.now = 0.0

    def time(self) -> float:
        return START + self.now

    def monotonic(self) -> float:
        return self.now

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        self.now += max(0.0, seconds)
        return stop.is_set()


class Engine:
    """A vLLM-like engine's metrics: each scrape, 3 more prefix-cache hits and one request
    of 0.4 s (in the (0.3, 0.5] bucket)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        self.hits = Counter(
            "vllm:prefix_cache_hits", "Prefix cache hits", labels, registry=self.registry
        ).labels("m", "0")
        self.latency = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        ).labels("m", "0")

    def scrape(self) -> bytes:
        self.hits.inc(3)
        self.latency.observe(0.4)
        return generate_latest(self.registry)


class Handler(BaseHTTPRequestHandler):
    engine: ClassVar[Engine]

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        kind = self.path.strip("/").split("/")[0]
        if kind == "fail":
            self.send_error(500, "boom")
            return
        body = self.engine.scrape() if kind == "vllm" else b"<html>not metrics</html>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server():
    Handler.engine = Engine()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def endpoints(server: str, *kinds: str) -> list[Endpoint]:
    return [Endpoint.parse(f"{kind}-0={server}/{kind}/metrics") for kind in kinds]


def test_every_sample_of_every_scrape_is_stored_and_failures_are_rows(warehouse, server):
    report = scrape_metrics(
        warehouse,
        endpoints(server, "vllm", "fail", "garbled"),
        ScrapeSpec(
            interval_s=60.0, duration_s=300.0, commit_every_s=120.0, timeout_s=30.0, run_name="live"
        ),
        clock=FakeClock(),
    )
    # ticks at 0, 60, ..., 240 s; commits when 120 s passed since the last (at 120 and 240 s)
    assert (report.scrapes, report.failed, report.commits) == (15, 10, 2)
    con = connect(warehouse)
    hits = con.execute(
        "SELECT t_s, value, delta FROM engine_counter_deltas "
        "WHERE metric = 'vllm:prefix_cache_hits_total' ORDER BY t_s"
    ).fetchall()
    # 3 more hits a scrape; the first scrape has no increase
    assert hits == [(60.0 * t, 3.0 * (t + 1), None if t == 0 else 3.0) for t in range(5)]
    labels = con.execute(
        "SELECT DISTINCT family, labels, type FROM engine_metrics "
        "WHERE metric = 'vllm:prefix_cache_hits_total'"
    ).fetchall()
    assert labels == [("vllm:prefix_cache_hits", '{"engine":"0","model_name":"m"}', "counter")]
    # one request of 0.4 s a scrape: the median of each 120 s window is inside (0.3, 0.5];
    # window [0, 120) counts only the increase at 60 s (the first scrape has none)
    quantiles = con.execute(
        "SELECT t_s, observations, quantile_value "
        "FROM engine_histogram_quantiles(q := 0.5, window_s := 120)"
    ).fetchall()
    # rank 0.5 of 1 in the (0.3, 0.5] bucket: 0.3 + 0.2 x 0.5; rank 1 of 2: the same
    assert quantiles == [
        (0.0, 1.0, pytest.approx(0.4)),
        (120.0, 2.0, pytest.approx(0.4)),
        (240.0, 1.0, pytest.approx(0.4)),
    ]
    up = con.execute(
        "SELECT worker_id, count(*), sum(value) FROM engine_metrics WHERE metric = 'up' "
        "GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert up == [("fail-0", 5, 0.0), ("garbled-0", 5, 0.0), ("vllm-0", 5, 5.0)]
    errors = con.execute(
        "SELECT worker_id, labels->>'error' FROM engine_metrics "
        "WHERE metric = 'kvtrace_scrape_error' GROUP BY ALL ORDER BY 1"
    ).fetchall()
    assert errors[0] == ("fail-0", "HTTP 500 boom")
    assert errors[1][0] == "garbled-0"
    assert errors[1][1].startswith("not Prometheus text exposition format")
    ts = con.execute("SELECT min(epoch_us(ts)) / 1e6, max(t_s) FROM engine_metrics").fetchone()
    assert ts == (START, 240.0)
    (config,) = con.execute("SELECT collector_config FROM runs").fetchone()
    assert json.loads(config)["endpoints"]["vllm-0"] == f"{server}/vllm/metrics"


def test_batches_are_committed_as_soon_as_enough_rows_wait(warehouse, server):
    # one scrape of the vLLM endpoint: 1 counter + 21 buckets, _count, _sum, 2 _created
    # gauges and the 3 scrape series = 30 rows
    report = scrape_metrics(
        warehouse,
        endpoints(server, "vllm"),
        ScrapeSpec(
            interval_s=60.0, duration_s=420.0, timeout_s=30.0, commit_every_s=36_000, batch_rows=60
        ),
        clock=FakeClock(),
    )
    # 7 scrapes of 30 rows: committed after scrapes 2, 4 and 6, then the last at the end
    assert (report.scrapes, report.rows, report.commits) == (7, 210, 4)


def test_a_stop_writes_what_was_scraped(warehouse, server):
    stop = threading.Event()

    class StoppingClock(FakeClock):
        def wait(self, stop_event: threading.Event, seconds: float) -> bool:
            if self.now >= 120.0:
                stop.set()  # as SIGTERM or Ctrl-C would, during the wait before tick 3
            return super().wait(stop_event, seconds)

    report = scrape_metrics(
        warehouse,
        endpoints(server, "vllm"),
        ScrapeSpec(interval_s=60.0, timeout_s=30.0, commit_every_s=36_000),
        clock=StoppingClock(),
        stop=stop,
    )
    assert (report.scrapes, report.commits) == (3, 1)
    assert query_rows(warehouse.location, "SELECT count(DISTINCT t_s) FROM engine_metrics") == [
        (3,)
    ]


def test_saved_scrapes_ingest_into_the_same_rows(tmp_path, warehouse, server, cli):
    saved = tmp_path / "live.jsonl"
    scrape_metrics(
        warehouse,
        endpoints(server, "vllm", "fail"),
        ScrapeSpec(interval_s=30.0, duration_s=120.0, timeout_s=20.0, run_name="live", save=saved),
        clock=FakeClock(),
    )
    assert len(saved.read_text().splitlines()) == 8
    other = tmp_path / "other"
    assert cli("-q", "-w", str(other), "ingest", str(saved))[0] == 0
    columns = "worker_id, ts, t_s, metric, family, labels, value, type"
    order = "ORDER BY worker_id, ts, metric, labels"
    live = query_rows(warehouse.location, f"SELECT {columns} FROM engine_metrics {order}")
    ingested = query_rows(str(other), f"SELECT {columns} FROM engine_metrics {order}")
    assert len(live) == 4 * 30 + 4 * 3
    assert ingested == live


def test_settings_that_cannot_work_are_one_sentence(warehouse, server, tmp_path):
    targets = endpoints(server, "vllm")
    with pytest.raises(InputError, match=r"^the timeout \(1 s\) must be positive and below"):
        scrape_metrics(warehouse, targets, ScrapeSpec(interval_s=1.0, timeout_s=1.0))
    with pytest.raises(InputError, match="give each endpoint its own"):
        scrape_metrics(warehouse, targets + targets, ScrapeSpec())
    exists = tmp_path / "taken.jsonl"
    exists.write_text("")
    with pytest.raises(InputError, match="exists: --save writes a new file"):
        scrape_metrics(warehouse, targets, ScrapeSpec(duration_s=1.0, save=exists))


def test_the_command_scrapes_and_reports(tmp_path, server, cli):
    location = str(tmp_path / "wh")
    status, out, _ = cli(
        "-q",
        "-w",
        location,
        "collect",
        "metrics",
        "--endpoint",
        f"gpu0={server}/vllm/metrics",
        "--run",
        "cli-run",
        "--interval",
        "60",
        "--timeout",
        "30",  # a real timeout no loaded machine runs out of
        "--duration",
        "0.1",  # the first tick only, however fast the machine
    )
    assert status == 0
    assert out.startswith("scraped 1 endpoint(s): 1 scrapes, 0 failed, 30 rows in 1 commits")
    assert query_rows(location, "SELECT run_name, kind FROM runs") == [("cli-run", "serving")]
    status, _, err = cli("-w", location, "collect", "metrics", "--endpoint", "ftp://x/metrics")
    assert status == 1
    assert err.strip() == (
        "Error: endpoint 'ftp://x/metrics' is not an http(s) URL (NAME=URL or URL)"
    )


@pytest.mark.parametrize(
    "text",
    ["gpu0=http://127.0.0.1:99999/metrics", "gpu0=http://h:port/metrics", "gpu0=http:///metrics"],
)
def test_an_endpoint_without_a_usable_host_and_port_is_one_sentence(text):
    # urllib only finds these out when the first request is made (port 99999 is out of
    # 0-65535, "port" is no number, the third names no host): refused before a run starts
    with pytest.raises(InputError, match=r"^endpoint .* has no usable host and port"):
        Endpoint.parse(text)


def test_a_duration_below_a_millisecond_is_refused_before_a_run_starts(tmp_path, cli):
    location = tmp_path / "wh"
    for duration in ("-1", "0"):
        status, _, err = cli(
            "-w", str(location), "collect", "metrics",
            "--endpoint", "gpu0=http://127.0.0.1:9/metrics", "--duration", duration,
        )  # fmt: skip
        assert status == 2
        assert "Invalid value for '--duration'" in err
    assert not location.exists()  # no empty run was written
