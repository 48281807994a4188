"""The Ray engine on a cluster of a head and a worker node started on this machine: the
same answers as one machine, bit for bit."""

from __future__ import annotations

import json

import pytest

from kvtrace import connect
from kvtrace.analysis.kv_access.whatif import Tier, WhatIfAnalysis, WhatIfSpec, whatif
from kvtrace.analysis.shares import run_analysis
from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse
from tests.conftest import run_kvtrace, warehouse_at

ray = pytest.importorskip("ray")
TIERS = (Tier.parse("hbm:24:3000:0"), Tier.parse("local:64:50:5"), Tier.parse("remote:inf:20:30"))


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    from kvtrace.distributed import ray_engine

    nodes = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    nodes.add_node(num_cpus=1)
    ray_engine.start(nodes.address)
    yield nodes
    ray.shutdown()
    nodes.shutdown()


def _tables_equal(a, b) -> None:
    assert a.schema == b.schema
    assert a.to_pylist() == b.to_pylist()  # floats compared exactly


@pytest.mark.parametrize(
    "policy,scope",
    [("lru", "request"), ("fifo", "request"), ("lru", "run"), ("pin_prefix", "request")],
)
def test_whatif_on_ray_equals_one_machine_bit_for_bit(
    cluster, tmp_path_factory, synthetic_trace, policy, scope
):
    from kvtrace.distributed.ray_engine import RayExecutor

    warehouse = Warehouse(warehouse_at(tmp_path_factory.mktemp("ray") / "wh"), create=True)
    for n in range(2):
        ingest(
            warehouse,
            [str(synthetic_trace(run_name=f"r{n}", requests=5, steps=6, layers=4, seed=n))],
        )
    spec = WhatIfSpec(block_sizes=(16, 64), tiers=TIERS, policy=policy, scope=scope)
    con = connect(warehouse)
    alone = whatif(con, spec)
    con.close()
    spread = run_analysis(WhatIfAnalysis(spec), warehouse, RayExecutor(), tasks=3)
    _tables_equal(alone.tiers, spread.tiers)
    _tables_equal(alone.runs, spread.runs)


def test_ingest_on_ray_stores_what_one_machine_stores(cluster, tmp_path, synthetic_trace):
    from kvtrace.distributed.ray_engine import RayExecutor

    traces = [
        str(synthetic_trace(run_name=f"f{n}", requests=2, steps=3, layers=4, seed=n))
        for n in range(3)
    ]
    here = Warehouse(warehouse_at(tmp_path / "here"), create=True)
    there = Warehouse(warehouse_at(tmp_path / "there"), create=True)
    alone = ingest(here, traces)
    spread = ingest(there, traces, executor=RayExecutor())
    assert [(f.path, f.run_id, f.rows) for f in spread.files] == [
        (f.path, f.run_id, f.rows) for f in alone.files
    ]
    query = (
        "SELECT run_id, request_id, step_idx, layer_id, selected_pos FROM dsa_steps ORDER BY ALL"
    )
    assert connect(here).execute(query).fetchall() == connect(there).execute(query).fetchall()
    again = ingest(there, traces, executor=RayExecutor())
    assert {f.status for f in again.files} == {"already ingested"}


def test_summary_on_ray_equals_one_machine_bit_for_bit(cluster, tmp_path, synthetic_trace):
    from kvtrace.analysis.summary import SummaryAnalysis, SummarySpec, run_summary
    from kvtrace.distributed.ray_engine import RayExecutor

    root = warehouse_at(tmp_path / "wh")
    warehouse = Warehouse(root, create=True)
    ingest(warehouse, [str(synthetic_trace(run_name="s", requests=7, steps=4, layers=4, seed=2))])
    con = connect(warehouse)
    alone = run_summary(con, "s")
    con.close()
    spread = run_analysis(SummaryAnalysis(SummarySpec("s")), warehouse, RayExecutor(), tasks=3)
    assert spread == alone  # floats compared exactly
    result = run_kvtrace("-w", root, "summary", "--run", "s", "--engine", "ray")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == alone
