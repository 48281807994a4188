"""A collection that commits once does so however slow the machine: `kvtrace demo` (whose
warehouse the guides count files of) commits its trace at the end, not every 30 s."""

from __future__ import annotations

import itertools
import math
import time
from types import SimpleNamespace

import numpy as np
import pytest

import kvtrace.cli.demo as demo_command
from kvtrace import connect
from kvtrace.collectors import dsa_tracer
from kvtrace.collectors.dsa_tracer import DsaTracer


def _slow_machine_clock(monkeypatch) -> None:
    """The tracer's writer sees 1,000 s pass between any two of its clock readings: a
    machine far slower than any commit interval."""
    readings = itertools.count(0.0, 1000.0)
    monkeypatch.setattr(
        dsa_tracer,
        "time",
        SimpleNamespace(
            monotonic=lambda: next(readings), perf_counter=time.perf_counter, time=time.time
        ),
    )


def _collect_commits(warehouse) -> int:
    con = connect(warehouse)
    ((count,),) = con.sql(
        "SELECT count(DISTINCT warehouse_version) FROM warehouse_commits "
        "WHERE operation = 'collect'"
    ).fetchall()
    return count


def test_a_trace_committed_at_the_end_is_one_commit_on_a_slow_machine(warehouse, monkeypatch):
    _slow_machine_clock(monkeypatch)
    rng = np.random.default_rng(0)
    tracer = DsaTracer(warehouse, run_name="slow", dataset="unit", topk=16, commit_every_s=math.inf)
    for request in range(3):  # 3 requests x 4 steps x 2 layers, each step its own batch
        tracer.begin_request(request, list(range(100 + request)))
        for step in range(4):
            start = 100 + request + step
            with tracer.step(start):
                for layer in range(2):
                    tracer.record_topk(layer, rng.choice(start + 1, 16, replace=False))
            time.sleep(0)  # the writer may take each step alone
        tracer.end_request(request, new_tokens=4)
    tracer.close()
    assert _collect_commits(warehouse) == 1
    rows = connect(warehouse).sql("SELECT count(*) FROM dsa_steps").fetchall()
    assert rows == [(3 * 4 * 2,)]


def test_the_demo_collects_with_one_commit_at_the_end(monkeypatch):
    handed = []

    def collect(options):
        handed.append(options)
        raise RuntimeError("stop before tracing")

    monkeypatch.setattr(demo_command, "_run_collect", collect)
    with pytest.raises(RuntimeError, match="stop before tracing"):
        demo_command.demo()
    (options,) = handed
    assert options.commit_every_s == math.inf
