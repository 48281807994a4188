"""The prefix curve's memory: a few bytes per block read, not the requests' objects.

Each curve runs in a fresh process that reports its peak resident memory above what
it held before the curve (imports and connection done); two traces over the same
blocks, one with four times the requests, give what the extra reads cost.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse

CONVERSATIONS = 2_000  # shared prefixes, each a chain of block ids
BLOCKS = 32  # blocks per conversation
PER_READ = 80  # bytes of peak memory a block read may add (numbered ids, tokens, ...)

_MEASURE = """
import sys
from kvtrace import connect
from kvtrace.analysis.prefix_cache import PrefixCurveSpec, prefix_hit_curve_rows
from kvtrace.warehouse import Warehouse

def kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1])

con = connect(Warehouse(sys.argv[1]))
con.sql("SELECT count(*) FROM workload_requests").fetchall()
before = kib("VmRSS:")
rows = prefix_hit_curve_rows(con, PrefixCurveSpec(sys.argv[2], (), "prefix", "tokens"))
print("peak", kib("VmHWM:") - before, len(rows))
"""


def _trace(folder, requests: int) -> tuple[str, int]:
    """A warehouse of ``requests`` requests, each a prefix of one of the conversations
    (so the distinct blocks stay the same however many requests); its block reads."""
    rng = np.random.default_rng(requests)
    picks = rng.integers(0, CONVERSATIONS, requests)
    lengths = rng.integers(BLOCKS // 2, BLOCKS + 1, requests)
    path = folder / f"trace{requests}.jsonl"
    with path.open("w") as out:
        for i, (pick, length) in enumerate(zip(picks.tolist(), lengths.tolist(), strict=True)):
            ids = list(range(pick * BLOCKS, pick * BLOCKS + length))
            record = {"timestamp": i, "input_length": 512 * length - 7, "output_length": 1}
            out.write(json.dumps({**record, "hash_ids": ids}) + "\n")
    root = str(folder / f"wh{requests}")
    ingest(Warehouse(root, create=True), [str(path)])
    return root, int(lengths.sum())


def _peak_kib(root: str, policy: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, root, policy],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return int(done.stdout.split()[-2])  # after any progress output


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    folder = tmp_path_factory.mktemp("prefix-memory")
    return _trace(folder, 10_000), _trace(folder, 40_000)


@pytest.mark.parametrize("policy", ["lru", "radix_lru"])
def test_the_curve_costs_a_few_bytes_per_block_read(traces, policy):
    """Four times the requests over the same blocks: the extra peak memory is a few
    bytes per extra block read (it was over 90 when every read's weights, positions and
    eviction-heap room were arrays of their own)."""
    (small, small_reads), (large, large_reads) = traces
    grown_kib = _peak_kib(large, policy) - _peak_kib(small, policy)
    assert grown_kib * 1024 < PER_READ * (large_reads - small_reads), grown_kib
