"""``kvtrace collect metrics``: scrape Prometheus text endpoints into ``engine_metrics``.

Every ``interval_s`` each endpoint is scraped (all of them at once, each within a
timeout below the interval; a tick missed while a scrape or a commit ran is skipped, never
made up), and every sample of its exposition becomes a row
(`kvtrace.warehouse.rows.engine_metrics`), beside the series Prometheus adds to a scrape
(``up``, ``scrape_duration_seconds``, ``scrape_samples_scraped``).  An endpoint that is
down, slow or answers something that is not exposition text gives ``up`` 0 and a
``kvtrace_scrape_error`` row saying why, and scraping goes on.

Rows are committed every ``commit_every_s`` seconds, or sooner when ``batch_rows`` rows
wait, by a thread of their own while scraping goes on; a batch waits for the one before
it, so at most two batches are held whatever the duration, and a crash loses at most
those.  ``save`` also writes each scrape as a JSON line (``{"t", "worker", "body"}``, or
``"error"`` for a failed one, and ``"duration_s"``), which ``kvtrace ingest`` reads back
into the same rows.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Protocol

from kvtrace.collectors._pool_sources import MalformedResponse
from kvtrace.collectors.pool_poller import Endpoint, _Deadline, _fetch
from kvtrace.errors import InputError
from kvtrace.warehouse import Warehouse
from kvtrace.warehouse.rows.bookkeeping import collection_run_id, run_row
from kvtrace.warehouse.rows.engine_metrics import (
    ExpositionError,
    MetricRows,
    Samples,
    parse_exposition,
    scrape_rows,
)

__all__ = ["Clock", "Endpoint", "Scrape", "ScrapeReport", "ScrapeSpec", "scrape_metrics"]

Fetch = Callable[[str, float], tuple[int, str, bytes]]  # GET url within a timeout


class Clock(Protocol):
    """Where the scraper takes its time from (a fake one drives it in tests)."""

    def time(self) -> float:
        """Now, in Unix seconds."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""
        ...

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        """Wait ``seconds`` or until ``stop`` is set; whether it was set."""
        ...


class SystemClock:
    """The machine's clocks."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        return stop.wait(max(0.0, seconds))


@dataclass(frozen=True)
class ScrapeSpec:
    """What a scrape of Prometheus endpoints is asked: its pace, its end, its run, how
    often it commits and whether it saves what it scraped."""

    interval_s: float = 1.0
    duration_s: float | None = None  # None: until stopped
    timeout_s: float | None = None  # None: half the interval, at most 5 s
    run_name: str | None = None  # None: metrics-<time>
    experiment: str | None = None  # None: the run name
    commit_every_s: float = 10.0  # how often rows are committed (and at the end)
    batch_rows: int = 100_000  # commit sooner when this many rows wait
    save: Path | None = None  # also write every scrape to this JSONL file


@dataclass
class ScrapeReport:
    run_id: str
    scrapes: int = 0
    failed: int = 0
    rows: int = 0  # rows committed
    commits: int = 0


@dataclass
class Scrape:
    """One scrape of one endpoint: when, how long, what it gave or why it failed."""

    worker: str
    at: float  # Unix seconds, when it was sent
    duration_s: float
    body: str | None
    error: str | None
    samples: Samples | None  # None when it failed

    def rows(self) -> Samples:
        """Its samples and the series Prometheus adds to a scrape."""
        return scrape_rows(self.samples, self.duration_s, self.error)

    def record(self) -> dict:
        """The scrape as a line of a saved-scrapes file."""
        saved: dict = {"t": self.at, "worker": self.worker, "duration_s": self.duration_s}
        if self.error is not None:
            saved["error"] = self.error
        else:
            saved["body"] = self.body
        return saved


def scrape_once(endpoint: Endpoint, timeout_s: float, clock: Clock, fetch: Fetch) -> Scrape:
    """Scrape one endpoint; a failure of any kind is the scrape's ``error``."""
    at = clock.time()
    started = time.perf_counter()
    body: str | None = None
    error: str | None = None
    samples: Samples | None = None
    try:
        status, reason, raw = fetch(endpoint.url, timeout_s)
        if status != 200:
            error = f"HTTP {status} {reason}"
        else:
            body = raw.decode("utf-8")
            samples = parse_exposition(body)
    except UnicodeDecodeError:
        error = "the response is not UTF-8 text"
    except (_Deadline, TimeoutError):
        error = f"timeout after {timeout_s:g} s"
    except OSError as exc:
        error = f"unreachable: {exc.strerror or exc}"
    except (ExpositionError, MalformedResponse) as exc:
        error = str(exc)
    except (http.client.HTTPException, ValueError) as exc:
        error = f"{type(exc).__name__}: {exc}"[:300]
    duration_s = time.perf_counter() - started
    if error is not None:
        body, samples = None, None
    return Scrape(endpoint.name, at, duration_s, body, error, samples)


def scrape_metrics(
    warehouse: Warehouse,
    endpoints: list[Endpoint],
    spec: ScrapeSpec = ScrapeSpec(),
    *,
    stop: threading.Event | None = None,
    on_batch: Callable[[ScrapeReport], None] | None = None,
    clock: Clock | None = None,
    fetch: Fetch = _fetch,
) -> ScrapeReport:
    """Scrape ``endpoints`` every ``spec.interval_s`` until ``spec.duration_s`` passes,
    ``stop`` is set or the user presses Ctrl-C; what was scraped is committed."""
    clock = clock or SystemClock()
    timeout_s = _checked(endpoints, spec)
    started_at = datetime.fromtimestamp(clock.time(), timezone.utc)
    name = spec.run_name or f"metrics-{started_at:%Y%m%dT%H%M%SZ}"
    report = ScrapeReport(collection_run_id(name))
    label = spec.experiment or name
    stop = stop or threading.Event()
    config = {
        "collector": "metrics",
        "endpoints": {e.name: e.url for e in endpoints},
        "interval_s": spec.interval_s,
        "timeout_s": timeout_s,
        "experiment": label,
    }
    committer = _Committer(
        warehouse,
        report,
        run_row(
            report.run_id,
            name,
            "serving",
            source="collect",
            collector_config=config,
            started_at=started_at,
        ),
        label,
    )
    pending = MetricRows()
    with contextlib.ExitStack() as stack:
        saved = stack.enter_context(_save_file(spec.save))
        pool = (
            stack.enter_context(ThreadPoolExecutor(len(endpoints), thread_name_prefix="scrape"))
            if len(endpoints) > 1
            else None
        )
        try:
            for scrapes in _ticks(endpoints, spec, timeout_s, stop, clock, fetch, pool):
                for scrape in scrapes:
                    pending.add(scrape.worker, scrape.at, scrape.rows())
                    report.scrapes += 1
                    report.failed += scrape.error is not None
                    if saved is not None:
                        saved.write(json.dumps(scrape.record(), ensure_ascii=False) + "\n")
                if saved is not None:
                    saved.flush()
                if pending.rows >= spec.batch_rows or committer.due(clock, spec.commit_every_s):
                    committer.submit(pending, clock)
                    pending = MetricRows()
                    if on_batch:
                        on_batch(report)
        except KeyboardInterrupt:
            pass  # Ctrl-C is how an open-ended scrape ends: write what was scraped
        finally:
            committer.submit(pending, clock)
            committer.close()
    return report


def _checked(endpoints: list[Endpoint], spec: ScrapeSpec) -> float:
    """The scrape timeout; `InputError` for settings that cannot work."""
    if not endpoints:
        raise InputError("give at least one --endpoint")
    if len({e.name for e in endpoints}) < len(endpoints):
        raise InputError("two --endpoint options have one NAME: give each endpoint its own")
    if spec.interval_s <= 0:
        raise InputError("the interval must be positive")
    if spec.commit_every_s <= 0 or spec.batch_rows <= 0:
        raise InputError("--commit-every and --batch-rows must be positive")
    timeout = spec.timeout_s if spec.timeout_s is not None else min(spec.interval_s / 2, 5.0)
    if not 0 < timeout < spec.interval_s:
        raise InputError(
            f"the timeout ({timeout:g} s) must be positive and below the "
            f"interval ({spec.interval_s:g} s), or scrapes would overlap"
        )
    return timeout


def _ticks(
    endpoints: list[Endpoint],
    spec: ScrapeSpec,
    timeout_s: float,
    stop: threading.Event,
    clock: Clock,
    fetch: Fetch,
    pool: ThreadPoolExecutor | None,
) -> Iterator[list[Scrape]]:
    """Each tick's scrapes of every endpoint, until the duration passes or ``stop``."""
    origin = clock.monotonic()
    tick = 0
    while not stop.is_set():
        planned = origin + tick * spec.interval_s
        if spec.duration_s is not None and planned - origin >= spec.duration_s:
            return
        if clock.wait(stop, planned - clock.monotonic()):
            return
        if pool is None:
            yield [scrape_once(endpoints[0], timeout_s, clock, fetch)]
        else:
            yield list(pool.map(lambda e: scrape_once(e, timeout_s, clock, fetch), endpoints))
        # never overlap: go on with the first tick still ahead
        ahead = int((clock.monotonic() - origin) // spec.interval_s) + 1
        tick = max(tick + 1, ahead)


@contextlib.contextmanager
def _save_file(path: Path | None) -> Iterator[IO[str] | None]:
    """The new file scrapes are saved to, or None."""
    if path is None:
        yield None
        return
    try:
        handle = open(path, "x", encoding="utf-8")  # noqa: SIM115 (closed below)
    except FileExistsError:
        raise InputError(f"{path} exists: --save writes a new file; give another path") from None
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None
    with handle:
        yield handle


class _Committer:
    """Commits batches on a thread of its own, one at a time; the first commit also
    records the run."""

    def __init__(
        self, warehouse: Warehouse, report: ScrapeReport, run: dict, experiment: str
    ) -> None:
        self.warehouse, self.report, self.run, self.experiment = (
            warehouse,
            report,
            run,
            experiment,
        )
        self.origin: float | None = None  # the run's first scrape
        self.last_submit: float | None = None
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="metrics-commit")
        self.in_flight: Future[None] | None = None
        self.submitted = 0

    def due(self, clock: Clock, every_s: float) -> bool:
        if self.last_submit is None:
            self.last_submit = clock.monotonic()
        return clock.monotonic() - self.last_submit >= every_s

    def submit(self, rows: MetricRows, clock: Clock) -> None:
        """Commit ``rows`` once the batch before is committed (its error raised here)."""
        self.last_submit = clock.monotonic()
        if self.origin is None:
            self.origin = rows.first_scrape
        if not rows.rows and self.submitted:
            return
        self._wait()
        self.submitted += 1
        self.in_flight = self.thread.submit(self._commit, rows, self.origin)

    def close(self) -> None:
        try:
            self._wait()
        finally:
            self.thread.shutdown()

    def _wait(self) -> None:
        if self.in_flight is not None:
            in_flight, self.in_flight = self.in_flight, None
            in_flight.result()

    def _commit(self, rows: MetricRows, origin: float | None) -> None:
        run_id = self.report.run_id
        with self.warehouse.transaction(run_id, operation="collect") as commit:
            if rows.rows:
                table = rows.table(origin or 0.0, self.experiment, run_id)
                self.warehouse.write(commit, "engine_metrics", table)
            if self.report.commits == 0:
                self.warehouse.write_rows(commit, "runs", [self.run])
        self.report.commits += 1
        self.report.rows += rows.rows
