"""kvtrace's ``definitions := 'hta'`` give Holistic Trace Analysis' own answers (HTA 0.5,
run here) on every trace of HTA's test data that kvtrace reads (``tests/data/hta``),
analysis for analysis: the temporal breakdown, the kernel type breakdown, the
communication / computation overlap, the kernel launch statistics, the queue length, the
idle time breakdown, the per-kernel durations, the memory bandwidth series and summary,
and the critical path (of the first ProfilerStep, or the whole trace where there is
none).  kvtrace's own definitions give HTA's figures where they agree by design: on the
real sample and on generated ranks.  HTA 0.5 counts ``gpu_user_annotation`` spans as
computation kernels (kvtrace's own definitions do not: they mark time, they do no work),
so the generated traces here carry none."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from kvtrace.synthetic.timeline import TimelineShape, write_timeline_trace
from kvtrace.warehouse import Warehouse
from tests.conftest import DATA, warehouse_at
from tests.timeline.hta_quiet import quiet_hta
from tests.timeline.hta_reference import (
    ANALYSES,
    differences,
    hta_answers,
    kvtrace_answers,
    kvtrace_critical_paths,
)

hta = pytest.importorskip("hta.trace_analysis")

HTA_DATA = DATA / "hta"
TRACES = sorted(path.name.removesuffix(".json.gz") for path in HTA_DATA.glob("*.json.gz"))


def _trace_folder(parent: Path, trace: str) -> Path:
    """A folder holding one of HTA's traces alone (kvtrace and HTA read folders)."""
    folder = parent / trace
    folder.mkdir()
    shutil.copy(HTA_DATA / f"{trace}.json.gz", folder)
    return folder


@pytest.fixture(scope="module")
def kvtrace_side(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """kvtrace's answers on every trace, from one warehouse holding each as a run: per
    trace, its answers and the annotation its critical path starts from."""
    root = tmp_path_factory.mktemp("hta_traces")
    folders = [_trace_folder(root, trace) for trace in TRACES]
    warehouse = Warehouse(warehouse_at(root / "wh"), create=True)
    ingest(warehouse, [str(folder) for folder in folders])
    con = connect(warehouse)
    try:
        answers = kvtrace_answers(con)
        stepped = {
            run_id
            for (run_id,) in con.sql(
                "SELECT DISTINCT run_id FROM timeline_events WHERE name LIKE 'ProfilerStep#%'"
            ).fetchall()
        }
        paths = {
            "ProfilerStep": kvtrace_critical_paths(con, "ProfilerStep"),
            "": kvtrace_critical_paths(con, ""),
        }
    finally:
        con.close()
    found = {}
    for run_id, run_answers in answers.items():
        annotation = "ProfilerStep" if run_id in stepped else ""
        run_answers["critical path"] = paths[annotation].get(run_id, {})
        found[run_id.rsplit("-", 1)[0]] = {"answers": run_answers, "annotation": annotation}
    return found


@pytest.mark.parametrize("trace", TRACES)
def test_hta_definitions_give_htas_answers(kvtrace_side, tmp_path, trace):
    ours = kvtrace_side[trace]
    theirs = hta_answers(_trace_folder(tmp_path, trace), ours["annotation"])
    assert set(theirs) == set(ANALYSES), "HTA answers every analysis on its own traces"
    found = differences(trace, ours["answers"], theirs)
    assert not found, "\n".join(found)


def _hta(folder: Path) -> dict:
    with quiet_hta():
        analysis = hta.TraceAnalysis(trace_dir=str(folder), include_last_profiler_step=True)
        temporal = analysis.get_temporal_breakdown(visualize=False)
        overlap = analysis.get_comm_comp_overlap(visualize=False)
        _, kernels = analysis.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
    sums = kernels.groupby(["rank", "kernel_type"])["sum (us)"].sum()
    return {
        "temporal": sorted(
            (
                int(r["rank"]),
                r["kernel_time(us)"],
                r["idle_time(us)"],
                r["compute_time(us)"],
                r["non_compute_time(us)"],
            )
            for _, r in temporal.iterrows()
        ),
        "overlap_pctg": sorted(
            (int(r["rank"]), r["comp_comm_overlap_pctg"]) for _, r in overlap.iterrows()
        ),
        "kernels": sorted(
            (int(rank), kind.lower(), total) for (rank, kind), total in sums.items() if total > 0
        ),
    }


def _kvtrace(folder: Path, tmp_path: Path) -> dict:
    warehouse = Warehouse(warehouse_at(tmp_path / "wh"), create=True)
    ingest(warehouse, [str(folder)])
    con = connect(warehouse)
    try:
        return {
            "temporal": con.execute(
                "SELECT rank, kernel_time_us, idle_us, compute_us, non_compute_us "
                "FROM timeline_temporal_breakdown ORDER BY rank"
            ).fetchall(),
            "overlap_pctg": con.execute(
                "SELECT rank, round(100 * overlap_share, 2) FROM timeline_comm_comp_overlap "
                "ORDER BY rank"
            ).fetchall(),
            "kernels": con.execute(
                "SELECT rank, kernel_type, total_us FROM timeline_kernel_breakdown "
                "WHERE kernel_type IN ('computation', 'communication', 'memory') "
                "ORDER BY ALL"
            ).fetchall(),
        }
    finally:
        con.close()


def _same(ours: dict, theirs: dict) -> None:
    for key in ("temporal", "overlap_pctg", "kernels"):
        assert len(ours[key]) == len(theirs[key]), key
        for mine, other in zip(ours[key], theirs[key], strict=True):
            assert mine == pytest.approx(tuple(other), abs=0.01), key


def test_kvtraces_own_definitions_give_htas_figures_on_the_real_sample(tmp_path):
    """On the sample (no syncs, no annotations, whole microseconds) kvtrace's own
    definitions and HTA's agree."""
    folder = _trace_folder(tmp_path, "sampled_rank0")
    ours, theirs = _kvtrace(folder, tmp_path), _hta(folder)
    _same(ours, theirs)
    assert ours["temporal"] == [(0, 1222847, 675191, 210320, 337336)]  # HTA's, by value


def test_generated_ranks_give_htas_figures_and_the_chosen_ones(tmp_path):
    shape = TimelineShape(
        iterations=3,
        layers=6,
        kernels_per_layer=3,
        compute_us=180,
        comm_us=40,
        comm_hidden_us=32,
        gpu_annotations=False,
    )
    folder = tmp_path / "ranks"
    folder.mkdir()
    for rank in range(3):
        write_timeline_trace(folder / f"rank{rank}.pt.trace.json", shape, rank=rank, world_size=3)
    ours, theirs = _kvtrace(folder, tmp_path), _hta(folder)
    _same(ours, theirs)
    expected = shape.expected()
    assert {row[1:] for row in ours["temporal"]} == {
        (
            expected["kernel_time_us"],
            expected["idle_time_us"],
            expected["compute_time_us"],
            expected["non_compute_time_us"],
        )
    }
    share = round(100 * expected["comm_overlapped_us"] / expected["comm_us"], 2)
    assert ours["overlap_pctg"] == [(rank, share) for rank in range(3)]
