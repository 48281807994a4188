"""The what-if's memory does not grow with the trace: a request decoding five times longer
(its stored positions 64 MB more, 16 windows' worth) peaks where the shorter one does,
each measured in a fresh process by its peak RSS."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from kvtrace.analysis.kv_access._stream import WINDOW_ROWS
from kvtrace.collectors.dsa_tracer import DsaTracer
from kvtrace.warehouse import Warehouse

LAYERS, TOPK, PROMPT = 8, 2048, 4096
# the what-if (block size 24: re-binned from the stored positions, 2048 a row) in a
# fresh process, then the process's peak resident memory in MB
WHATIF = """
import re, sys
from kvtrace import connect
from kvtrace.analysis.kv_access.whatif import WhatIfSpec, whatif
result = whatif(connect(sys.argv[1]), WhatIfSpec(block_sizes=(24,), granularity=sys.argv[2]))
assert result.runs.num_rows == 1
print(int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read())[1]) / 1024)
"""


def _long_request(path, steps: int) -> str:
    """A warehouse holding one request that decodes ``steps`` steps over all layers."""
    rng = np.random.default_rng(steps)
    tracer = DsaTracer(
        Warehouse(path, create=True), run_name="long", dataset="unit", block_sizes=(16,), topk=TOPK
    )
    tracer.begin_request(0, list(range(PROMPT)))
    for step in range(steps):
        seq_len = PROMPT + step
        with tracer.step({0: seq_len}):
            for layer in range(LAYERS):
                start = int(rng.integers(0, seq_len - TOPK))
                tracer.record_topk(layer, np.arange(start, start + TOPK)[None, :])
    tracer.end_request(0)
    tracer.close()
    return str(path)


def _peak_mb(warehouse: str, granularity: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", WHATIF, warehouse, granularity],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.split()[-1])


@pytest.fixture(scope="module")
def short_and_long(tmp_path_factory) -> tuple[str, str]:
    """Warehouses of one request decoding 4 and 20 windows' worth of stored rows."""
    steps = WINDOW_ROWS // LAYERS
    root = tmp_path_factory.mktemp("requests")
    return _long_request(root / "short", 4 * steps), _long_request(root / "long", 20 * steps)


@pytest.mark.parametrize("granularity", ["block", "layer_block"])
def test_the_whatif_peaks_alike_on_a_request_five_times_longer(short_and_long, granularity):
    short, long = short_and_long
    grown_mb = 16 * WINDOW_ROWS * TOPK * 4 / 1e6  # the stored positions the long one adds
    short_peak, long_peak = _peak_mb(short, granularity), _peak_mb(long, granularity)
    assert grown_mb > 60
    # reading the long request whole peaked 2.6 to 3.4 times the growth higher
    assert long_peak - short_peak < grown_mb * 2 / 3, (short_peak, long_peak)
