"""The pool poller against a real HTTP server on loopback: every failure mode."""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from kvtrace import connect
from kvtrace.collectors.pool_poller import Endpoint, PollSpec, poll_pool
from kvtrace.errors import InputError
from tests.conftest import KVTRACE_PROCESS

PROMETHEUS = """# HELP sglang:kv_available_tokens free tokens
sglang:kv_available_tokens{tp_rank="0"} 70000
sglang:kv_used_tokens{tp_rank="0"} 22086
sglang:kv_evictable_tokens{tp_rank="0"} 1000
sglang:streaming_session_held_tokens{tp_rank="0"} 15000
sglang:num_running_reqs{tp_rank="0"} 3
sglang:token_usage{tp_rank="0"} 0.24
"""


class Worker(BaseHTTPRequestHandler):
    active: ClassVar[dict[str, int]] = {}
    most_at_once: ClassVar[dict[str, int]] = {}
    lock = threading.Lock()

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        kind = self.path.strip("/").split("/")[0]
        with self.lock:
            self.active[kind] = self.active.get(kind, 0) + 1
            self.most_at_once[kind] = max(self.most_at_once.get(kind, 0), self.active[kind])
        try:
            self._answer(kind)
        finally:
            with self.lock:
                self.active[kind] -= 1

    def _answer(self, kind: str) -> None:
        if kind == "slow":
            time.sleep(0.5)
        if kind == "fail":
            self.send_error(500, "boom")
            return
        if kind == "garbage":
            body = b"<html>not json</html>"
        elif kind == "prom":
            body = PROMETHEUS.encode()
        else:
            cache = {
                "held_tokens": 100,
                "available_tokens": 900,
                "capacity_tokens": 2000,
                "session_count": 2,
                "radix_protected_tokens": 500,
                "sessions": [{"id": "s1"}],
            }
            body = json.dumps(
                {"internal_states": [{"session_cache": cache, "last_gen_throughput": 42.5}]}
            ).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Worker)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_poller_survives_slow_failing_malformed_and_down_workers(warehouse, server):
    endpoints = [
        Endpoint.parse(text)
        for text in (
            f"decode-0={server}/ok/server_info",
            f"decode-1={server}/slow/server_info",
            f"decode-2={server}/fail/server_info",
            f"decode-3={server}/garbage/server_info",
            f"prefill-0={server}/prom/metrics",
            f"decode-4=http://127.0.0.1:{_closed_port()}/server_info",
        )
    ]
    report = poll_pool(
        warehouse,
        endpoints,
        PollSpec(
            interval_s=0.2,
            timeout_s=0.1,
            duration_s=1.5,
            batch_s=0.5,
            run_name="poll-test",
            experiment="exp-poll",
        ),
    )
    assert report.commits >= 2  # written in batches while polling
    con = connect(warehouse)
    rows = con.execute(
        "SELECT worker_id, worker_role, t_s, held_tokens, other_tokens, poll_error "
        "FROM pool_other ORDER BY worker_id, t_s"
    ).fetchall()
    by_worker: dict[str, list] = {}
    for row in rows:
        by_worker.setdefault(row[0], []).append(row)
    assert set(by_worker) == {f"decode-{i}" for i in range(5)} | {"prefill-0"}
    for worker, ticks in by_worker.items():
        healthy = worker in ("decode-0", "prefill-0")
        assert (6 if healthy else 2) <= len(ticks) <= 9, (worker, len(ticks))
        gaps = [b[2] - a[2] for a, b in itertools.pairwise(ticks)]
        assert min(gaps) > 0.15, worker  # never two polls of one worker at once
        if not healthy:  # backing off: 2, then 4 intervals between failed polls
            assert gaps[:2] == pytest.approx([0.4, 0.8], abs=0.1), (worker, gaps)
    assert all(r[5] is None and r[3] == 100 and r[4] == 1000 for r in by_worker["decode-0"])
    assert all(r[5].startswith("timeout after 0.1 s") for r in by_worker["decode-1"])
    assert all(r[5].startswith("HTTP 500") for r in by_worker["decode-2"])
    assert all(r[5].startswith("malformed /server_info") for r in by_worker["decode-3"])
    assert all(r[5].startswith("unreachable") for r in by_worker["decode-4"])
    prom = con.execute(
        "SELECT capacity_tokens, available_tokens, held_tokens, "
        "idle_evictable_tokens, running_batch_size, worker_role "
        "FROM pool_snapshots WHERE worker_id = 'prefill-0' LIMIT 1"
    ).fetchone()
    assert prom == (92086, 70000, 15000, 1000, 3, "prefill")
    latency = con.execute(
        "SELECT min(poll_latency_ms), max(poll_latency_ms) FROM "
        "pool_snapshots WHERE worker_id = 'decode-1'"
    ).fetchone()
    assert latency[0] >= 90 and latency[1] < 400
    assert Worker.most_at_once["slow"] <= 2  # the back-off lets a slow worker catch up
    run = con.execute("SELECT run_name, source, kind FROM runs").fetchall()
    assert run == [("poll-test", "collect", "serving")]
    operations = con.execute("SELECT DISTINCT operation FROM warehouse_commits").fetchall()
    assert operations == [("collect",)]  # the journal labels collections as such
    extra = con.execute(
        "SELECT radix_protected_tokens, last_gen_throughput, sessions "
        "FROM pool_snapshots WHERE worker_id = 'decode-0' LIMIT 1"
    ).fetchone()
    assert extra == (500, 42.5, '[{"id": "s1"}]')


def test_a_timeout_not_below_the_interval_is_refused(warehouse):
    with pytest.raises(InputError, match="below the interval"):
        poll_pool(
            warehouse,
            [Endpoint.parse("http://127.0.0.1:9/x")],
            PollSpec(interval_s=1.0, timeout_s=1.0, duration_s=0.1),
        )


def test_endpoint_names_and_roles():
    assert Endpoint.parse("decode-2=http://h:1/server_info") == Endpoint(
        "decode-2", "http://h:1/server_info", "decode"
    )
    assert Endpoint.parse("http://h:1/metrics").name == "h:1"
    assert Endpoint.parse("prefill-0=http://h:1/server_info?x=1").url == (
        "http://h:1/server_info?x=1"
    )
    assert Endpoint.parse("http://h:1/server_info?x=1").name == "h:1"
    with pytest.raises(InputError):
        Endpoint.parse("decode-2=ftp://h")


def test_prometheus_labels_with_braces_and_the_token_usage_fallback():
    from kvtrace.collectors._pool_sources import rows_from_prometheus

    text = (
        "# HELP sglang:kv_available_tokens free\n"
        'sglang:kv_available_tokens{tp_rank="0",note="a}b"} 60000\n'
        'sglang:kv_available_tokens{tp_rank="1"} 10000\n'
        'sglang:num_used_tokens{tp_rank="0"} 30000\n'
        'sglang:token_usage{tp_rank="0"} 0.25\n'
    )
    row = rows_from_prometheus(text.encode(), "decode-0", "decode")[0]
    # labelled samples are summed; capacity = used / usage when kv_used_tokens is absent
    assert row["available_tokens"] == 70000 and row["capacity_tokens"] == 120000


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_sigterm_or_ctrl_c_flushes_the_rows_and_closes_the_run(tmp_path, server, how):
    """systemd, docker and Kubernetes stop a process with SIGTERM: the poller writes
    every row it polled and the run row, and exits 0, as it does on Ctrl-C."""
    import os
    import signal
    import subprocess

    from tests.conftest import warehouse_at

    location = warehouse_at(tmp_path / "wh")
    process = subprocess.Popen(
        [
            *KVTRACE_PROCESS,
            "-w",
            location,
            "collect",
            "pool",
            "--endpoint",
            f"decode-0={server}/ok/server_info",
            "--interval",
            "0.2",
            "--run-name",
            "stopped",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(4)  # about 20 polls, none committed yet (a batch is 10 s)
    os.kill(process.pid, getattr(signal, how))
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    polled = int(out.split("polled 1 worker(s): ")[1].split(" polls")[0])
    assert polled >= 5
    con = connect(location)
    assert con.execute("SELECT count(*) FROM pool_snapshots").fetchone() == (polled,)
    assert con.execute("SELECT run_name FROM runs").fetchall() == [("stopped",)]
