"""Memory and commits of ``kvtrace collect metrics`` over a long scrape, in a fresh process.

    python benchmarks/bench_metrics_scrape.py [--scrapes 300] [--hour] [--series 1000]

A loopback HTTP server (in this process) serves a Prometheus text exposition of
``--series`` series (counters that grow at every scrape, gauges, and histograms of 12
buckets with their sum and count); a fresh ``kvtrace collect metrics`` process scrapes it
every second for ``--scrapes`` seconds (``--hour``: 3,600) and commits every 10 s, as a
user runs it, except that its clock is a fake one: a wait for the next tick returns at
once, so an hour of scrapes takes the time its work takes, with no sleeping.  The fake
clock also reads the process's resident memory (VmRSS) after each sixth of the scrapes,
to show whether it grows with the duration.

Prints one Markdown table row: scrapes, rows and commits written, wall and CPU seconds
of the collecting process, its peak RSS (VmHWM), and VmRSS at each sixth.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HISTOGRAM_BOUNDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)  # + "+Inf"
PER_HISTOGRAM = len(HISTOGRAM_BOUNDS) + 1 + 2  # buckets with +Inf, _sum, _count


def exposition(series: int, scrape: int) -> bytes:
    """The text of scrape number ``scrape``: 40 % counters, 30 % gauges, the rest in
    histograms (``series`` samples in all)."""
    counters = series * 4 // 10
    histograms = (series - counters) * 3 // 7 // PER_HISTOGRAM
    gauges = series - counters - histograms * PER_HISTOGRAM
    lines = ["# HELP bench:requests_total Requests served.", "# TYPE bench:requests_total counter"]
    lines += [f'bench:requests_total{{slot="{i}"}} {scrape * (i % 7 + 1)}' for i in range(counters)]
    lines += ["# HELP bench:queue_depth Requests waiting.", "# TYPE bench:queue_depth gauge"]
    lines += [f'bench:queue_depth{{slot="{i}"}} {(scrape * 7 + i) % 50}' for i in range(gauges)]
    lines += ["# HELP bench:latency_seconds Latency.", "# TYPE bench:latency_seconds histogram"]
    for route in range(histograms):
        for k, bound in enumerate((*HISTOGRAM_BOUNDS, "+Inf")):
            lines.append(
                f'bench:latency_seconds_bucket{{le="{bound}",route="{route}"}} {scrape * (k + 1)}'
            )
        lines.append(f'bench:latency_seconds_sum{{route="{route}"}} {scrape * 1.5}')
        lines.append(f'bench:latency_seconds_count{{route="{route}"}} {scrape * 12}')
    return ("\n".join(lines) + "\n").encode()


def serve(series: int) -> tuple[ThreadingHTTPServer, str]:
    """The loopback endpoint: each request gets the next scrape's exposition."""
    counter = iter(range(1 << 62))
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            with lock:
                scrape = next(counter)
            body = exposition(series, scrape)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/metrics"


# The collecting process: the command line with the fake clock put in place.
CHILD = r"""
import json, re, sys, threading
from kvtrace.collectors import metrics_scraper
from kvtrace import cli

marks = {int(m): None for m in sys.argv[1].split(",")}

def status(field):
    return int(re.search(field + r":\s+(\d+)", open("/proc/self/status").read())[1])

class FakeClock:
    start = 1_796_000_000.0
    def __init__(self):
        self.now, self.ticks = 0.0, 0
    def time(self):
        return self.start + self.now
    def monotonic(self):
        return self.now
    def wait(self, stop, seconds):
        if self.ticks in marks:  # after that many scrapes
            marks[self.ticks] = status("VmRSS")
        self.ticks += 1
        self.now += max(0.0, seconds)
        return stop.is_set()

metrics_scraper.SystemClock = FakeClock
sys.argv = ["kvtrace", *sys.argv[2:]]
code = cli.run()
last = max(marks)
marks[last] = marks[last] or status("VmRSS")  # after the last scrape's commit
print(json.dumps({"rss_kb": marks, "peak_kb": status("VmHWM")}), file=sys.stderr)
sys.exit(code)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=300, help="seconds of scraping at 1 s")
    parser.add_argument("--hour", action="store_true", help="3,600 scrapes (an hour)")
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--commit-every", type=float, default=10.0)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    scrapes = 3600 if args.hour else args.scrapes
    work = Path(args.workdir or tempfile.mkdtemp(prefix="kvtrace-bench-metrics-"))
    work.mkdir(parents=True, exist_ok=True)
    warehouse = work / f"wh-{scrapes}"
    server, url = serve(args.series)
    marks = sorted({scrapes * k // 6 for k in range(1, 7)})
    command = [
        sys.executable,
        "-c",
        CHILD,
        ",".join(map(str, marks)),
        "-q",
        "-w",
        str(warehouse),
        "collect",
        "metrics",
        "--endpoint",
        f"bench={url}",
        "--run",
        "bench",
        "--interval",
        "1",
        "--duration",
        str(scrapes),
        "--commit-every",
        str(args.commit_every),
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    server.shutdown()
    if done.returncode != 0:
        sys.exit(f"the collection failed:\n{done.stdout}\n{done.stderr}")
    found = re.search(
        r"(\d[\d,]*) scrapes, (\d[\d,]*) failed, (\d[\d,]*) rows in (\d[\d,]*)", done.stdout
    )
    assert found, done.stdout
    scraped, failed, rows, commits = (int(g.replace(",", "")) for g in found.groups())
    memory = json.loads(done.stderr.strip().splitlines()[-1])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rss = {int(k): v for k, v in memory["rss_kb"].items()}
    print(
        "| series | scrapes (failed) | rows | commits | wall s | CPU s | peak RSS | "
        + " | ".join(f"RSS after {m:,}" for m in marks)
        + " |"
    )
    print("|" + "---|" * (7 + len(marks)))
    print(
        f"| {args.series:,} | {scraped:,} ({failed}) | {rows:,} | {commits:,} | {wall:.1f} | "
        f"{cpu:.1f} | {memory['peak_kb'] / 1024:.0f} MiB | "
        + " | ".join(f"{rss[m] / 1024:.0f} MiB" for m in marks)
        + " |"
    )


if __name__ == "__main__":
    main()
