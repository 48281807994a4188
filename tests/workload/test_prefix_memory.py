"""The prefix curve's memory: a few bytes per block read and per distinct block, for every
policy under every semantics it serves, not the requests' objects.

Each curve runs in a fresh process that reports its peak resident memory above what
it held before the curve (a curve over a few requests run first: imports, connection
and compiled kernels in place), reading 4,096 requests at a time.  Two traces over the
same blocks, one with four times the requests, give what the extra reads cost; two with
the same reads, one over sixteen times the conversations, what the extra blocks cost.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from kvtrace.analysis.policies import POLICIES
from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse

CONVERSATIONS = 2_000  # shared prefixes, each a chain of block ids
BLOCKS = 32  # blocks per conversation
REQUESTS = 10_000
# bytes of peak memory a block read may add, past the requests read at a time: its id
# and tokens, the LRU distance or the next use, each thread's hit marks (measured: 10 to
# 28; before int32 next uses and ids, OPT's per-read heap took 53)
PER_READ = 48
# bytes a distinct block may add, for every capacity up to them all: its number, each
# thread's marks, uses, child counts and eviction-heap room (measured: 13 to 49; 58 to
# 177 when hash tables and the prefix tree's numbering held 32 to 128 bytes a block)
PER_BLOCK = 80
CURVES = [(p.name, s) for p in POLICIES for s in p.prefix_semantics]

_MEASURE = """
import sys
from kvtrace import connect
from kvtrace.analysis import prefix_cache
from kvtrace.analysis.prefix_cache import PrefixCurveSpec, prefix_hit_curve_rows
from kvtrace.warehouse import Warehouse

def kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1])

prefix_cache._BATCH_ROWS = 4096  # requests read at a time: what one read costs, past them
spec = PrefixCurveSpec(sys.argv[2], (), sys.argv[3], "tokens")
prefix_hit_curve_rows(connect(Warehouse(sys.argv[4])), spec)  # the kernels compiled or loaded
con = connect(Warehouse(sys.argv[1]))
con.sql("SELECT count(*) FROM workload_requests").fetchall()
with open("/proc/self/clear_refs", "w") as peak:
    peak.write("5")  # the peak from here on
before = kib("VmRSS:")
rows = prefix_hit_curve_rows(con, spec)
print("peak", kib("VmHWM:") - before, len(rows))
"""


def _trace(folder, requests: int, conversations: int) -> tuple[str, int, int]:
    """A warehouse of ``requests`` requests, each a prefix of one of the conversations
    (the same draws whatever the conversations: the same reads over more blocks); its
    block reads and distinct blocks."""
    rng = np.random.default_rng(requests)
    picks = (rng.random(requests) * conversations).astype(np.int64)
    lengths = rng.integers(BLOCKS // 2, BLOCKS + 1, requests)
    path = folder / f"trace{requests}-{conversations}.jsonl"
    blocks = set()
    with path.open("w") as out:
        for i, (pick, length) in enumerate(zip(picks.tolist(), lengths.tolist(), strict=True)):
            ids = list(range(pick * BLOCKS, pick * BLOCKS + length))
            blocks.update(ids)
            record = {"timestamp": i, "input_length": 512 * length - 7, "output_length": 1}
            out.write(json.dumps({**record, "hash_ids": ids}) + "\n")
    root = str(folder / f"wh{requests}-{conversations}")
    ingest(Warehouse(root, create=True), [str(path)])
    return root, int(lengths.sum()), len(blocks)


def _peak_kib(root: str, policy: str, semantics: str, warm: str) -> int:
    """The curve's peak resident memory over ``root``, in KiB, above what the process
    held after a curve over ``warm`` (a small trace: kernels and imports in place)."""
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, root, policy, semantics, warm],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return int(done.stdout.split()[-2])  # after any progress output


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """A few requests to warm up on, the base trace, four times its requests, and those
    requests over sixteen times the conversations."""
    folder = tmp_path_factory.mktemp("prefix-memory")
    return (
        _trace(folder, 64, CONVERSATIONS)[0],
        _trace(folder, REQUESTS, CONVERSATIONS),
        _trace(folder, 4 * REQUESTS, CONVERSATIONS),
        _trace(folder, 4 * REQUESTS, 16 * CONVERSATIONS),
    )


@pytest.mark.parametrize(("policy", "semantics"), CURVES)
def test_the_curve_costs_a_few_bytes_per_read_and_per_block(traces, policy, semantics):
    """Four times the requests over the same blocks: the extra peak memory is a few
    bytes per extra block read.  The same reads over more blocks: a few dozen bytes per
    extra distinct block, for every capacity of the curve up to them all."""
    warm, (base, base_reads, _), (longer, reads, blocks), (wider, wider_reads, wider_blocks) = (
        traces
    )
    assert wider_reads == reads
    base_kib, longer_kib, wider_kib = (
        _peak_kib(root, policy, semantics, warm) for root in (base, longer, wider)
    )
    assert (longer_kib - base_kib) * 1024 < PER_READ * (reads - base_reads), longer_kib - base_kib
    assert (wider_kib - longer_kib) * 1024 < PER_BLOCK * (wider_blocks - blocks), wider_kib
