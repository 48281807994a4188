"""``kvtrace collect pool``: sample every worker's KV pool at a fixed interval.

Polling perturbed the server in the serving study, so the poller stays light: one
thread per worker and never two polls of one worker at once (a poll that overruns makes
the worker skip the ticks it missed), a timeout well under the interval, the workers'
ticks spread over the interval plus a little jitter, each poll's own latency recorded,
and a worker whose polls keep failing polled less often (every 2, 4, then 8 intervals)
until it answers again.  A worker that is down, slow or answers garbage gives a row with
``poll_error`` and polling goes on.  Rows are committed in small batches, so a crash
loses at most one batch.
"""

from __future__ import annotations

import contextlib
import http.client
import queue
import random
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

import pyarrow as pa

from kvtrace.collectors._endpoints import labelled
from kvtrace.collectors._pool_sources import (
    MalformedResponse,
    rows_from_prometheus,
    rows_from_server_info,
)
from kvtrace.errors import InputError
from kvtrace.warehouse import Warehouse
from kvtrace.warehouse.rows.bookkeeping import collection_run_id, run_row
from kvtrace.warehouse.schema.serving import POOL_SNAPSHOTS

MAX_BACKOFF_DOUBLINGS = 3  # a failing worker is polled every 2, 4, then 8 intervals


@dataclass(frozen=True)
class Endpoint:
    """A worker to poll: ``NAME=URL`` or a bare URL (named after its host and port)."""

    name: str
    url: str
    role: str | None

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        name, url = labelled(text)
        if not url.startswith(("http://", "https://")):
            raise InputError(f"endpoint {text!r} is not an http(s) URL (NAME=URL or URL)")
        parts = urllib.parse.urlsplit(url)
        try:
            usable = parts.hostname is not None and parts.port != 0
        except ValueError:  # a port that is no number or out of 0-65535
            usable = False
        if not usable:
            raise InputError(
                f"endpoint {text!r} has no usable host and port (http://HOST:PORT/PATH)"
            )
        role = next((r for r in ("prefill", "decode") if r in name.lower()), None)
        return cls(name, url, role)

    def parse_rows(self, body: bytes) -> list[dict]:
        parse = (
            rows_from_prometheus
            if self.url.rstrip("/").endswith("/metrics")
            else (rows_from_server_info)
        )
        return parse(body, self.name, self.role)


@dataclass
class PollReport:
    run_id: str
    polls: int = 0
    errors: int = 0
    rows: int = 0
    commits: int = 0


def poll_once(endpoint: Endpoint, timeout_s: float) -> list[dict]:
    """Poll one worker: its rows (or one row with poll_error), each with the poll's latency.

    The whole request, body included, must finish within ``timeout_s`` (a server that
    drips its answer is cut off), and a body over `MAX_BODY_BYTES` is refused.
    """
    started = time.perf_counter()
    try:
        status, reason, body = _fetch(endpoint.url, timeout_s)
        if status != 200:
            rows = [_error_row(endpoint, f"HTTP {status} {reason}")]
        else:
            rows = endpoint.parse_rows(body)  # pool_row checks types and ranges
    except (_Deadline, TimeoutError):
        rows = [_error_row(endpoint, f"timeout after {timeout_s:g} s")]
    except OSError as exc:
        rows = [_error_row(endpoint, f"unreachable: {exc.strerror or exc}")]
    except MalformedResponse as exc:
        rows = [_error_row(endpoint, str(exc))]
    except Exception as exc:  # any failure is a row, and polling goes on
        rows = [_error_row(endpoint, f"{type(exc).__name__}: {exc}"[:300])]
    latency_ms = (time.perf_counter() - started) * 1000
    for row in rows:
        row["poll_latency_ms"] = latency_ms
    return rows


MAX_BODY_BYTES = 8 << 20


class _Deadline(Exception):
    """The request ran past its whole-request deadline."""


def _fetch(url: str, timeout_s: float) -> tuple[int, str, bytes]:
    """GET ``url``: status, reason and body; at most ``timeout_s`` for all of it.

    Socket timeouts bound each read only, so a timer shuts the socket down when the
    whole request is due, which ends any read in progress.
    """
    parts = urllib.parse.urlsplit(url)
    connection_class = (
        http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    )
    connection = connection_class(parts.hostname or "", parts.port, timeout=timeout_s)
    expired = threading.Event()

    def cut_off() -> None:
        expired.set()
        if connection.sock is not None:
            with contextlib.suppress(OSError):
                connection.sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(timeout_s, cut_off)
    timer.start()
    try:
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        connection.request("GET", path, headers={"User-Agent": "kvtrace"})
        response = connection.getresponse()
        body = response.read(MAX_BODY_BYTES + 1)
        if expired.is_set():  # the cut-off ended the read early
            raise _Deadline()
        if len(body) > MAX_BODY_BYTES:
            raise MalformedResponse(f"response larger than {MAX_BODY_BYTES >> 20} MB")
        if response.length:  # fewer bytes than Content-Length promised
            raise http.client.IncompleteRead(body, response.length)
        return response.status, response.reason, body
    except (OSError, http.client.HTTPException):
        if expired.is_set():
            raise _Deadline() from None
        raise
    finally:
        timer.cancel()
        connection.close()


def _error_row(endpoint: Endpoint, message: str) -> dict:
    return {"worker_id": endpoint.name, "worker_role": endpoint.role, "poll_error": message}


@dataclass(frozen=True)
class PollSpec:
    """What a poll of worker pools is asked: its pace, its end and its run."""

    interval_s: float = 1.0
    duration_s: float | None = None  # None: until stopped
    timeout_s: float | None = None  # None: half the interval, at most 5 s
    run_name: str | None = None  # None: pool-<time>
    experiment: str | None = None  # None: the run name
    batch_s: float = 10.0  # how often rows are committed


def poll_pool(
    warehouse: Warehouse,
    endpoints: list[Endpoint],
    spec: PollSpec = PollSpec(),
    *,
    stop: threading.Event | None = None,
    on_batch: Callable[[PollReport], None] | None = None,
) -> PollReport:
    """Poll ``endpoints`` every ``spec.interval_s`` until ``spec.duration_s`` passes,
    ``stop`` is set or the user presses Ctrl-C.

    The timeout defaults to half the interval (at most 5 s) and must stay below it.
    """
    interval_s, duration_s, batch_s = spec.interval_s, spec.duration_s, spec.batch_s
    if interval_s <= 0:
        raise InputError("the interval must be positive")
    timeout = spec.timeout_s if spec.timeout_s is not None else min(interval_s / 2, 5.0)
    if not 0 < timeout < interval_s:
        raise InputError(
            f"the timeout ({timeout:g} s) must be positive and below the "
            f"interval ({interval_s:g} s), or polls would overlap"
        )
    if not endpoints:
        raise InputError("give at least one --endpoint")
    started_at = datetime.now(timezone.utc)
    name = spec.run_name or f"pool-{started_at:%Y%m%dT%H%M%SZ}"
    report = PollReport(collection_run_id(name))
    label = spec.experiment or name
    stop = stop or threading.Event()
    rows: queue.Queue[dict] = queue.Queue()
    origin = time.monotonic()
    deadline = origin + duration_s if duration_s is not None else None
    workers = [
        threading.Thread(
            target=_poll_worker,
            daemon=True,
            name=f"poll-{e.name}",
            args=(
                e,
                i / len(endpoints) * interval_s / 2,
                interval_s,
                timeout,
                origin,
                deadline,
                stop,
                rows,
                started_at,
            ),
        )
        for i, e in enumerate(endpoints)
    ]
    for worker in workers:
        worker.start()
    writer = _BatchWriter(
        warehouse,
        report,
        name,
        label,
        started_at,
        {
            "collector": "pool",
            "endpoints": [e.url for e in endpoints],
            "interval_s": interval_s,
            "timeout_s": timeout,
        },
    )
    try:
        while not stop.is_set():
            wait = (
                batch_s if deadline is None else max(0.0, min(batch_s, deadline - time.monotonic()))
            )
            if stop.wait(wait) or (deadline is not None and time.monotonic() >= deadline):
                break
            writer.flush(rows)
            if on_batch:
                on_batch(report)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how an open-ended poll ends: write what was polled
    finally:
        stop.set()
        for worker in workers:
            worker.join()
        writer.flush(rows)
    return report


def _poll_worker(
    endpoint: Endpoint,
    phase: float,
    interval: float,
    timeout: float,
    origin: float,
    deadline: float | None,
    stop: threading.Event,
    out: queue.Queue,
    started_at: datetime,
) -> None:
    tick = 0
    failures = 0
    while not stop.is_set():
        planned = origin + phase + tick * interval + random.uniform(0, interval * 0.05)
        if deadline is not None and planned >= deadline:
            return
        if stop.wait(max(0.0, planned - time.monotonic())):
            return
        sent = time.monotonic()
        try:
            found = poll_once(endpoint, timeout)
        except Exception as exc:  # a bug must not end this worker's polling
            found = [_error_row(endpoint, f"{type(exc).__name__}: {exc}"[:300])]
        for row in found:
            row["t_s"] = sent - origin
            row["ts"] = started_at.timestamp() + (sent - origin)
            out.put(row)
        failures = failures + 1 if all(row.get("poll_error") for row in found) else 0
        # never overlap: continue with the first tick that is still ahead, and back off
        # (2, 4, then 8 intervals) from a worker whose polls keep failing
        ahead = int((time.monotonic() - origin - phase) // interval) + 1
        tick = max(tick + 1, ahead) + 2 ** min(failures, MAX_BACKOFF_DOUBLINGS) - 1


class _BatchWriter:
    """Commits what the polling threads queued; the first commit also records the run."""

    def __init__(
        self,
        warehouse: Warehouse,
        report: PollReport,
        run_name: str,
        label: str,
        started_at: datetime,
        config: dict,
    ) -> None:
        self.warehouse, self.report = warehouse, report
        self.run_name, self.label, self.started_at, self.config = (
            run_name,
            label,
            started_at,
            config,
        )

    def flush(self, rows: queue.Queue) -> None:
        batch = []
        while True:
            try:
                batch.append(rows.get_nowait())
            except queue.Empty:
                break
        first = self.report.commits == 0
        if not batch and not first:
            return
        for row in batch:
            row["run_id"], row["experiment"] = self.report.run_id, self.label
            row["ts"] = datetime.fromtimestamp(row["ts"], timezone.utc)
        with self.warehouse.transaction(self.report.run_id, operation="collect") as commit:
            if batch:
                table = pa.Table.from_pylist(batch, schema=POOL_SNAPSHOTS.schema)
                self.warehouse.write(
                    commit,
                    "pool_snapshots",
                    table.sort_by([("worker_id", "ascending"), ("t_s", "ascending")]),
                )
            if first:
                self.warehouse.write_rows(commit, "runs", [self._run_row()])
        self.report.commits += 1
        self.report.rows += len(batch)
        self.report.errors += sum(1 for row in batch if row.get("poll_error"))
        self.report.polls += len({(row["worker_id"].split("#")[0], row["t_s"]) for row in batch})

    def _run_row(self) -> dict:
        return run_row(
            self.report.run_id,
            self.run_name,
            "serving",
            source="collect",
            collector_config={**self.config, "experiment": self.label},
            started_at=self.started_at,
        )
