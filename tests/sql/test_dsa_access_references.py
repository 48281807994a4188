"""The DSA access stream's hit curves against libCacheSim's LRU, FIFO and Belady, run on
generated traces at the edges: capacity 1, the distinct items, the stream's length and
past it, one-position selections, repeated blocks across layers and steps; and the
invariants no reference is needed for: a shared pool that evicts nothing serves at least
what private pools do, and every summary's percentiles are in order.

The stream itself (which item each access names) is built here from the raw records by
the definition of `dsa_access.sql`; libCacheSim simulates it, one request per access of
a one-byte object, each request's cache apart (scope 'request') or one cache for the run
(scope 'run').  A failing comparison names the policy, the capacity, the stream and both
numbers.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtrace import connect
from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse
from tests.conftest import seed_record, write_jsonl
from tests.sql.test_dsa_access import _streams
from tests.workload.test_prefix_references import _libcachesim_hits

pytest.importorskip("libcachesim")


@st.composite
def dsa_traces(draw: st.DrawFn) -> list[dict]:
    """One to three requests of one to four decode steps on one or two layers, each
    selecting one to six positions of its sequence, each holding one of two prefix
    keys."""
    records = []
    layers = draw(st.integers(1, 2))
    for request in range(draw(st.integers(1, 3))):
        prompt = draw(st.integers(1, 60))
        key = draw(st.sampled_from(["p", "q"]))  # a miss states 0 cached blocks
        prefix = {"prefix_cache_hit": False, "prefix_cached_blocks": 0, "prefix_key": key}
        for step in range(prompt, prompt + draw(st.integers(1, 4))):
            for layer in range(layers):
                positions = draw(
                    st.lists(st.integers(0, step), min_size=1, max_size=6, unique=True)
                )
                records.append(seed_record(request, layer, step, sorted(positions), prefix=prefix))
    return records


@settings(max_examples=12)
@given(dsa_traces(), st.sampled_from([4, 16]), st.sampled_from(["block", "layer_block"]))
def test_hit_curves_equal_libcachesim_s(records, block_size, granularity):
    with tempfile.TemporaryDirectory() as folder:
        warehouse = Warehouse(str(Path(folder) / "wh"), create=True)
        ingest(warehouse, [str(write_jsonl(Path(folder) / "t.jsonl", records))])
        con = connect(warehouse)
        numbered: dict[tuple, int] = {}  # libCacheSim names an object by an integer
        streams = {
            request: [numbered.setdefault(item, len(numbered)) for item in stream]
            for request, stream in _streams(records, block_size, granularity).items()
        }
        for scope in ("request", "run"):
            units = (
                list(streams.values())
                if scope == "request"
                else [[item for r in sorted(streams) for item in streams[r]]]
            )
            reads = sum(map(len, units))
            capacities = sorted({1, max(len(set(u)) for u in units), reads, reads + 1})
            listed = ", ".join(map(str, capacities))
            for policy in ("lru", "fifo", "opt"):
                rows = dict(
                    con.execute(
                        f"SELECT capacity_blocks, hits FROM dsa_hit_curve({block_size}, "
                        f"'{policy}', '{granularity}', '{scope}', [{listed}])"
                    ).fetchall()
                )
                for capacity in capacities:
                    theirs = sum(_libcachesim_hits(unit, capacity, policy) for unit in units)
                    assert rows[capacity] == theirs, (
                        f"{policy} ({granularity}, scope {scope}) at {capacity} items: "
                        f"kvtrace {rows[capacity]} hits, libCacheSim {theirs} on {units}"
                    )


@settings(max_examples=12)
@given(dsa_traces(), st.sampled_from([4, 16]), st.sampled_from(["block", "layer_block"]))
def test_a_shared_pool_serves_what_private_pools_do_and_percentiles_are_ordered(
    records, block_size, granularity
):
    with tempfile.TemporaryDirectory() as folder:
        warehouse = Warehouse(str(Path(folder) / "wh"), create=True)
        ingest(warehouse, [str(write_jsonl(Path(folder) / "t.jsonl", records))])
        con = connect(warehouse)
        hits = {
            sharing: con.execute(
                f"SELECT hits FROM dsa_hit_curve({block_size}, 'lru', '{granularity}', "
                f"'run', [1000000], '{sharing}') WHERE capacity_blocks = 1000000"
            ).fetchall()
            for sharing in ("private", "content")
        }
        assert hits["content"][0][0] >= hits["private"][0][0], (hits, records)
        summary = con.execute("SELECT * FROM dsa_summary").fetchall()
        names = [d[0] for d in con.description]
        for row in summary:
            for name, value in zip(names, row, strict=True):
                if isinstance(value, dict) and "p50" in value and value["count"]:
                    ordered = [value[k] for k in ("min", "p50", "p95", "max")]
                    assert ordered == sorted(ordered), (name, value)
                    assert value["min"] <= value["mean"] <= value["max"], (name, value)
