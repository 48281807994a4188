"""The KV-event collector in a thread of the test's process, subscribed to a loopback
`Publisher`, and the little the collector tests share."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable

from kvtrace import connect
from kvtrace.collectors.kv_event_subscriber import (
    CollectReport,
    EventSource,
    KvEventSpec,
    collect_kv_events,
)
from kvtrace.warehouse import Warehouse
from tests.collectors.kv_publisher import BlockStored, Publisher
from tests.conftest import KVTRACE_PROCESS

SETTLE_S = 0.5  # loopback delivery of what was just sent
HANG_GUARD_S = 60.0  # how long a test waits for what must come before calling it a hang


class Collection:
    """`collect_kv_events` in a thread, subscribed to ``publisher`` (and its replay
    endpoint unless ``replay`` is False), committing every 0.2 s."""

    def __init__(
        self, warehouse: Warehouse, publisher: Publisher, *, replay: bool = True, **options
    ) -> None:
        self.stop = threading.Event()
        self.result: dict = {}
        self.committed: CollectReport | None = None  # the report as of the last commit
        source = EventSource(
            "gpu0", publisher.endpoint, publisher.replay_endpoint if replay else None
        )

        def on_batch(report: CollectReport) -> None:
            self.committed = report

        def run() -> None:
            try:
                self.result["report"] = collect_kv_events(
                    warehouse,
                    [source],
                    KvEventSpec(topic="kv-events", batch_s=0.2, **options),
                    stop=self.stop,
                    on_batch=on_batch,
                )
            except Exception as exc:
                self.result["error"] = exc

        self.thread = threading.Thread(target=run)
        self.thread.start()
        publisher.wait_for_subscriber()

    def wait_until_committed(self, done: Callable[[CollectReport], bool]) -> None:
        """Wait until a commit has left a report for which ``done`` holds."""
        give_up = time.monotonic() + HANG_GUARD_S
        while self.committed is None or not done(self.committed):
            if not self.thread.is_alive() or time.monotonic() > give_up:
                raise AssertionError(f"the collector never got there: {self.result}")
            time.sleep(0.05)

    def finish(self) -> CollectReport:
        time.sleep(SETTLE_S)
        self.stop.set()
        self.thread.join(HANG_GUARD_S)
        if "error" in self.result:
            raise self.result["error"]
        return self.result["report"]


def collector_process(location: str, publisher: Publisher, *options: str) -> subprocess.Popen:
    """``kvtrace collect kv-events`` of ``publisher`` (and its replay socket) as a process."""
    return subprocess.Popen(
        [
            *KVTRACE_PROCESS,
            "-w",
            location,
            "collect",
            "kv-events",
            "--endpoint",
            f"gpu0={publisher.endpoint}",
            "--replay",
            publisher.replay_endpoint,
            "--topic",
            "kv-events",
            *options,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_rows(location: str, process: subprocess.Popen, query: str, count: int) -> list:
    """Wait until the rows of ``query`` number ``count`` or more (the collector ``process``
    committed them); the rows, sorted."""
    give_up = time.monotonic() + HANG_GUARD_S
    while len(rows := sorted(connect(location).sql(query).fetchall())) < count:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < give_up, f"the collector never committed {count} rows"
        time.sleep(0.2)
    return rows


def stored_event(hashes, parent, first_token, size=4, medium="GPU", lora_id=None) -> BlockStored:
    """A BlockStored event of ``hashes`` with consecutive token ids from ``first_token``."""
    tokens = list(range(first_token, first_token + size * len(hashes)))
    return BlockStored(hashes, parent, tokens, size, lora_id, medium)
