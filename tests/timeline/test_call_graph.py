"""Frequent CUDA kernel sequences and the critical path: HTA 0.5's own answers (run here)
on its published alexnet trace, the real Kineto sample and its traces of CUDA event
syncs, edge for edge; the SQL header's worked example and a CUDA-graph launch by hand."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse
from tests.conftest import DATA
from tests.timeline.hta_quiet import quiet_hta
from tests.timeline.test_hta_definitions import _trace

hta = pytest.importorskip("hta.trace_analysis")

ALEXNET = DATA / "hta" / "alexnet.json.gz"
SAMPLE = DATA / "hta" / "sampled_rank0.json.gz"
EVENT_SYNC = DATA / "hta" / "cuda_event_sync.json.gz"  # Event Syncs on stream -1
MULTI_STREAM = DATA / "hta" / "cuda_event_sync_multi_stream.json.gz"
MEASURE = "[param|pytorch.model.alex_net|0|0|0|measure|forward]"
WARMUP = "[param|pytorch.model.alex_net|0|0|0|warmup|forward]"


def _hta_analysis(tmp_path: Path, trace: Path) -> object:
    folder = tmp_path / trace.name.split(".")[0]
    folder.mkdir()
    shutil.copy(trace, folder / trace.name)
    with quiet_hta():
        return hta.TraceAnalysis(trace_dir=str(folder), include_last_profiler_step=True)


@pytest.mark.parametrize(
    ("trace", "operators"),
    [
        (ALEXNET, ["conv", "aten::linear", "[param"]),
        # HTA takes minutes over the sampled trace's ProfilerStep: one length of it
        (SAMPLE, ["aten::", "Optimizer", "ProfilerStep/3", "autograd"]),
        (EVENT_SYNC, ["aten::"]),
        (MULTI_STREAM, ["aten::"]),
    ],
)
def test_kernel_sequences_equal_htas(warehouse, tmp_path, trace, operators):
    """Each operator at the shortest pattern lengths 1 and 3 (or the one it names)."""
    ingest(warehouse, [str(trace)])
    analysis = _hta_analysis(tmp_path, trace)
    con = connect(warehouse)
    for named in operators:
        operator, _, length = named.partition("/")
        for shortest in (int(length),) if length else (1, 3):
            with quiet_hta():
                expected = analysis.get_frequent_cuda_kernel_sequences(
                    operator, str(tmp_path), min_pattern_len=shortest, visualize=False
                )
            found = con.execute(
                "SELECT pattern, count, gpu_kernel_us, cpu_op_us "
                "FROM timeline_kernel_sequences(?, min_pattern_len := ?) ORDER BY place",
                [operator, shortest],
            ).fetchall()
            assert found == [
                (
                    row["pattern"],
                    row["count"],
                    row["GPU kernel duration (us)"],
                    row["CPU op duration (us)"],
                )
                for _, row in expected.iterrows()
            ], (operator, shortest)
            assert found or shortest > 1, "every operator above has patterns"


def test_kernel_sequences_on_stream_0_where_hta_finds_none(warehouse, tmp_path):
    """HTA's ROCm trace runs its kernels on stream 0, which HTA's call graph does not hang
    under their launches: HTA finds no sequence, kvtrace finds them (the SQL header)."""
    trace = DATA / "hta" / "amd_mi250_minitoy.json.gz"
    ingest(warehouse, [str(trace)])
    analysis = _hta_analysis(tmp_path, trace)
    with quiet_hta():
        expected = analysis.get_frequent_cuda_kernel_sequences(
            "aten::", str(tmp_path), min_pattern_len=1, visualize=False
        )
    assert expected.empty
    found = (
        connect(warehouse)
        .sql("SELECT pattern, count FROM timeline_kernel_sequences('aten::', min_pattern_len := 1)")
        .fetchall()
    )
    assert ("aten::to|Memcpy HtoD (Host -> Device)", 2) in found


@pytest.mark.parametrize(
    ("trace", "annotation", "instance"),
    [
        (ALEXNET, MEASURE, 0),
        (ALEXNET, MEASURE, 1),
        (ALEXNET, WARMUP, 0),
        (ALEXNET, WARMUP, 1),
        (SAMPLE, "ProfilerStep", 0),
        (EVENT_SYNC, "ProfilerStep", 0),
        (MULTI_STREAM, "", 0),  # no ProfilerStep: the whole trace
    ],
)
def test_critical_path_equals_htas_edge_for_edge(warehouse, tmp_path, trace, annotation, instance):
    ingest(warehouse, [str(trace)])
    analysis = _hta_analysis(tmp_path, trace)
    with quiet_hta():
        graph, succeeded = analysis.critical_path_analysis(
            rank=0, annotation=annotation, instance_id=instance
        )
        assert succeeded
        breakdown = graph.get_critical_path_breakdown()
        summary = graph.summary()
    expected = Counter(
        (
            row["type"].removeprefix("critical_path_"),
            None if row["event_idx"] != row["event_idx"] else int(row["event_idx"]),
            float(row["duration"]),
            row["bound_by"] or None,
        )
        for _, row in breakdown.iterrows()
    )
    con = connect(warehouse)

    def edges(definitions: str) -> Counter:
        return Counter(
            con.execute(
                "SELECT edge_type, event_idx, duration_us, bound_by FROM timeline_critical_path("
                "annotation := ?, instance := ?, definitions := ?)",
                [annotation, instance, definitions],
            ).fetchall()
        )

    assert edges("hta") == expected
    shares = con.execute(
        "SELECT bound_by, 100 * share FROM timeline_critical_path_summary("
        "annotation := ?, instance := ?, definitions := 'hta') WHERE duration_us > 0",
        [annotation, instance],
    ).fetchall()
    assert dict(shares) == pytest.approx({k: v for k, v in summary.items() if v > 0})
    # the trace has no CUDA graphs: kvtrace's definitions find the same path
    assert edges("kvtrace") == expected


def _event(cat: str, name: str, ts: float, dur: float, **args: object) -> dict:
    thread = {"pid": 0, "tid": args["stream"]} if "stream" in args else {"pid": 1, "tid": 1}
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **thread, "args": args}


def _path(warehouse: Warehouse, definitions: str) -> list[tuple]:
    return (
        connect(warehouse)
        .execute(
            "SELECT edge_type, name, duration_us, bound_by FROM timeline_critical_path("
            "definitions := ?) ORDER BY step",
            [definitions],
        )
        .fetchall()
    )


def test_the_worked_example_by_hand(warehouse, tmp_path):
    """An operator at [0, 100) whose launch at [10, 20) starts a 200 us kernel at 30 on an
    empty stream, then cudaDeviceSynchronize at [100, 240)."""
    events = [
        _event("user_annotation", "ProfilerStep#1", 0, 250),
        _event("cpu_op", "aten::mm", 0, 100),
        _event("cuda_runtime", "cudaLaunchKernel", 10, 10, correlation=1),
        _event("kernel", "gemm", 30, 200, stream=7, correlation=1),
        _event("cuda_runtime", "cudaDeviceSynchronize", 100, 140, correlation=2),
        _event("cuda_sync", "Context Sync", 229, 10, stream=4294967295, correlation=2),
    ]
    ingest(warehouse, [str(_trace(tmp_path / "step.json.gz", events))])
    path = [
        ("operator", "aten::mm", 10.0, "cpu_bound"),  # the operator's time until its launch
        ("kernel_launch_delay", None, 20.0, "gpu_kernel_launch_overhead"),
        ("operator", "gemm", 200.0, "gpu_compute_bound"),
    ]  # the zero-length sync edge to the synchronize call's end adds nothing
    assert _path(warehouse, "kvtrace") == path
    assert _path(warehouse, "hta") == path
    summary = (
        connect(warehouse)
        .sql("SELECT bound_by, duration_us, round(share, 4) FROM timeline_critical_path_summary()")
        .fetchall()
    )
    assert summary == [
        ("gpu_compute_bound", 200.0, round(200 / 230, 4)),
        ("gpu_kernel_launch_overhead", 20.0, round(20 / 230, 4)),
        ("cpu_bound", 10.0, round(10 / 230, 4)),
    ]


def test_a_cuda_graph_launch_keeps_every_kernel_on_the_path(warehouse, tmp_path):
    """cudaGraphLaunch at [10, 20) runs three kernels on stream 7 under one correlation id,
    at [30, 80), [85, 130) and [135, 200); the host synchronizes at [100, 210).  HTA keeps
    only the last kernel (HTA issue 290); kvtrace's path runs through all three."""
    events = [
        _event("user_annotation", "ProfilerStep#1", 0, 250),
        _event("cpu_op", "graph_replay", 0, 50),
        _event("cuda_runtime", "cudaGraphLaunch", 10, 10, correlation=1),
        _event("kernel", "attention", 30, 50, stream=7, correlation=1),
        _event("kernel", "mlp", 85, 45, stream=7, correlation=1),
        _event("kernel", "sample", 135, 65, stream=7, correlation=1),
        _event("cuda_runtime", "cudaDeviceSynchronize", 100, 110, correlation=2),
        _event("cuda_sync", "Context Sync", 200, 5, stream=4294967295, correlation=2),
    ]
    ingest(warehouse, [str(_trace(tmp_path / "graph.json.gz", events))])
    assert _path(warehouse, "kvtrace") == [
        ("operator", "graph_replay", 10.0, "cpu_bound"),
        ("kernel_launch_delay", None, 20.0, "gpu_kernel_launch_overhead"),
        ("operator", "attention", 50.0, "gpu_compute_bound"),
        ("kernel_kernel_delay", "attention", 5.0, "gpu_kernel_kernel_overhead"),
        ("operator", "mlp", 45.0, "gpu_compute_bound"),
        ("kernel_kernel_delay", "mlp", 5.0, "gpu_kernel_kernel_overhead"),
        ("operator", "sample", 65.0, "gpu_compute_bound"),
    ]
    # HTA keeps the last kernel alone, unlinked from its launch: its 65 us outweigh the CPU
    assert _path(warehouse, "hta") == [("operator", "sample", 65.0, "gpu_compute_bound")]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("SELECT * FROM timeline_critical_path(definitions := 'perfetto')", "definitions must be"),
        ("SELECT * FROM timeline_critical_path(instance := -1)", "the instance must be 0 or more"),
        ("SELECT * FROM timeline_kernel_sequences('')", "needs an operator name"),
        ("SELECT * FROM timeline_kernel_sequences('aten', top_k := 0)", "top_k must be"),
    ],
)
def test_bad_arguments_are_one_sentence(cli, warehouse, query, message):
    ingest(warehouse, [str(ALEXNET)])
    status, _, err = cli("--warehouse", warehouse.location, "sql", query)
    assert status != 0 and message in err and "Traceback" not in err


def test_an_annotation_without_that_instance_gives_no_rows(warehouse):
    ingest(warehouse, [str(ALEXNET)])
    rows = (
        connect(warehouse)
        .sql(
            f"SELECT count(*) FROM timeline_critical_path(annotation := '{MEASURE}', instance := 2)"
        )
        .fetchall()
    )
    assert rows == [(0,)]
