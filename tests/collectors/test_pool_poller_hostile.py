"""The poller against misbehaving servers on loopback: every failure is a row, every
worker keeps being polled, and the run ends on time."""

from __future__ import annotations

import contextlib
import json
import socketserver
import threading
import time
from collections import Counter
from typing import ClassVar

import pytest

from kvtrace import connect
from kvtrace.collectors.pool_poller import MAX_BODY_BYTES, Endpoint, PollSpec, poll_once, poll_pool
from tests.conftest import warehouse_at

GOOD = json.dumps(
    {
        "internal_states": [
            {
                "session_cache": {
                    "held_tokens": 100,
                    "available_tokens": 900,
                    "capacity_tokens": 2000,
                    "session_count": 1,
                }
            }
        ]
    }
).encode()


def _ok(body: bytes, content_type: str = "application/json") -> bytes:
    return (
        f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


class Misbehaving(socketserver.BaseRequestHandler):
    hits: ClassVar[Counter[str]] = Counter()  # requests per path

    def handle(self) -> None:
        request = b""
        while b"\r\n\r\n" not in request:
            data = self.request.recv(4096)
            if not data:
                return
            request += data
        path = request.split(b" ")[1].decode()
        Misbehaving.hits[path.strip("/")] += 1
        with contextlib.suppress(OSError):  # the poller hung up, as it should
            getattr(self, "_" + path.strip("/").split("/")[0])()

    def _good(self) -> None:
        self.request.sendall(_ok(GOOD))

    def _short(self) -> None:  # promises 1000 bytes, sends 10 and hangs up
        self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + GOOD[:10])

    def _garbage(self) -> None:
        self.request.sendall(b"ICY 200 whatever\r\n\r\n")

    def _nan(self) -> None:  # Prometheus samples that are no numbers
        self.request.sendall(
            _ok(
                b'sglang:kv_available_tokens{r="0"} NaN\nsglang:kv_used_tokens{r="0"} +Inf\n',
                "text/plain",
            )
        )

    def _huge(self) -> None:
        self.request.sendall(
            _ok(
                json.dumps(
                    {
                        "internal_states": [
                            {
                                "session_cache": {
                                    "held_tokens": 2**70,
                                    "available_tokens": 9,
                                    "capacity_tokens": 20,
                                    "session_count": 1,
                                }
                            }
                        ]
                    }
                ).encode()
            )
        )

    def _big(self) -> None:  # a 100 MB body
        self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n")
        chunk = b"x" * (1 << 20)
        for _ in range(100):
            self.request.sendall(chunk)

    def _drip(self) -> None:  # one byte at a time, each well within a read timeout
        for byte in _ok(GOOD):  # minutes in all: far beyond any deadline below
            self.request.sendall(bytes([byte]))
            time.sleep(0.5)


@pytest.fixture
def server():
    socketserver.ThreadingTCPServer.daemon_threads = True
    httpd = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Misbehaving)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("short", "IncompleteRead"),
        ("garbage", "BadStatusLine"),
        ("nan/metrics", "not a finite number"),
        ("huge", "out of range"),
        ("big", f"larger than {MAX_BODY_BYTES >> 20} MB"),
        ("drip", "timeout after 0.3 s"),
    ],
)
def test_each_misbehaviour_is_one_error_row(server, path, message):
    started = time.monotonic()
    rows = poll_once(Endpoint.parse(f"w={server}/{path}"), timeout_s=0.3)
    assert len(rows) == 1 and message in rows[0]["poll_error"], rows
    assert time.monotonic() - started < 30  # one deadline for the request, not the drip's minutes


def test_every_worker_keeps_being_polled_and_good_rows_are_kept(server, warehouse):
    paths = ["good", "short", "garbage", "nan/metrics", "huge", "drip"]
    endpoints = [Endpoint.parse(f"{p.split('/')[0]}={server}/{p}") for p in paths]
    started = time.monotonic()
    report = poll_pool(
        warehouse, endpoints, PollSpec(interval_s=0.2, timeout_s=0.1, duration_s=2.0, batch_s=0.5)
    )
    assert time.monotonic() - started < 30  # --duration kept (a drip holds minutes)
    rows = (
        connect(warehouse)
        .execute(
            "SELECT worker_id, count(*), count(*) FILTER (WHERE poll_error IS NULL) "
            "FROM pool_snapshots GROUP BY ALL"
        )
        .fetchall()
    )
    polls = {worker: (n, ok) for worker, n, ok in rows}
    assert polls["good"][0] == polls["good"][1] >= 3  # every 0.2 s for 2 s, on a slow machine too
    for worker in ("short", "garbage", "nan", "huge", "drip"):
        assert polls[worker][0] >= 3 and polls[worker][1] == 0, (worker, polls)
    assert report.errors == sum(n for w, (n, _) in polls.items() if w != "good")


def test_ctrl_c_ends_a_poll_within_one_interval_and_keeps_the_rows(server, tmp_path):
    import signal
    import subprocess
    import sys

    root = warehouse_at(tmp_path / "wh")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvtrace",
            "-w",
            str(root),
            "-q",
            "collect",
            "pool",
            "--endpoint",
            f"good={server}/good",
            "--endpoint",
            f"drip={server}/drip",
            "--interval",
            "1.0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # a third poll of each worker has begun, so two are done, whatever start-up took
    before = Counter(Misbehaving.hits)
    deadline = time.monotonic() + 60
    while (
        time.monotonic() < deadline
        and min(Misbehaving.hits[w] - before[w] for w in ("good", "drip")) < 3
    ):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    started = time.monotonic()
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - started < 30, err  # not the drip's minutes
    assert proc.returncode == 0, err
    assert "polled 2 worker(s)" in out
    from kvtrace.warehouse import Warehouse

    rows = (
        connect(Warehouse(root))
        .execute("SELECT worker_id, count(*) FROM pool_snapshots GROUP BY ALL ORDER BY 1")
        .fetchall()
    )
    assert [w for w, _ in rows] == ["drip", "good"] and all(n >= 2 for _, n in rows)
