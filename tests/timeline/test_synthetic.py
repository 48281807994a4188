"""Generated timelines: the views reproduce overlaps chosen in advance, and the
generator's own expectations agree with a layout worked out by hand."""

from __future__ import annotations

import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from kvtrace.synthetic.timeline import (
    COMPUTE_STREAM,
    TimelineShape,
    write_timeline_trace,
)
from kvtrace.warehouse import Warehouse
from tests.conftest import warehouse_at

# One iteration, two layers, one kernel each, times relative to the iteration's start:
#   HtoD 0    [0, 60)     layer 0's blocks, nothing to hide behind
#   kernel 0  [70, 170)   after the 10 us gap
#   DtoH 0    [145, 175)  25 us under kernel 0, 5 exposed
#   HtoD 1    [150, 210)  prefetch: 20 us under kernel 0, 40 exposed
#   kernel 1  [220, 320)  waits for HtoD 1, then the gap
#   DtoH 1    [295, 325)  25 under kernel 1, 5 exposed; the iteration ends at 325
HAND = TimelineShape(
    iterations=1,
    layers=2,
    kernels_per_layer=1,
    compute_us=100,
    h2d_us=60,
    h2d_hidden_us=20,
    d2h_us=30,
    d2h_hidden_us=25,
    kernel_gap_us=10,
)


def _ingest(tmp_path, shape: TimelineShape, ranks: int = 1):
    folder = tmp_path / "traces"
    folder.mkdir()
    for rank in range(ranks):
        write_timeline_trace(
            folder / f"rank{rank}.pt.trace.json.gz", shape, rank=rank, world_size=ranks
        )
    warehouse = Warehouse(warehouse_at(tmp_path / "wh"), create=True)
    ingest(warehouse, [str(folder)])
    return connect(warehouse)


def test_the_generators_expectations_match_the_layout_worked_by_hand():
    expected = HAND.expected()
    assert expected["iteration_us"] == 325
    assert expected["iteration_busy_us"] == 60 + (210 - 70) + (325 - 220)
    assert (expected["h2d_copy_us"], expected["h2d_overlapped_us"], expected["h2d_exposed_us"]) == (
        120,
        20,
        100,
    )
    assert (expected["d2h_copy_us"], expected["d2h_overlapped_us"], expected["d2h_exposed_us"]) == (
        60,
        50,
        10,
    )
    assert expected["compute_time_us"] == 200
    assert expected["idle_time_us"] == 325 - 305


def test_the_views_find_the_hand_worked_overlaps(tmp_path):
    con = _ingest(tmp_path, HAND)
    copies = con.execute(
        "SELECT copy_kind, copy_us, overlapped_us, exposed_us "
        "FROM timeline_copy_overlap ORDER BY copy_kind"
    ).fetchall()
    assert copies == [("DtoH", 60, 50, 10), ("HtoD", 120, 20, 100)]
    layers = con.execute(
        "SELECT annotation, copy_us, overlapped_us, exposed_us "
        r"FROM timeline_copy_by_annotation('^layer_\d+$') ORDER BY annotation"
    ).fetchall()
    # layer_0 spans [0, 170): HtoD 0 and the hidden parts [145, 170);
    # layer_1 spans [170, 320): the exposed [170, 210) and DtoH 1's hidden [295, 320)
    assert layers == [("layer_0", 85, 25, 60), ("layer_1", 65, 25, 40)]
    busy = con.execute(
        "SELECT stream, busy_us, window_us FROM timeline_stream_busy ORDER BY stream"
    ).fetchall()
    assert busy == [(COMPUTE_STREAM, 200, 325), (20, 120, 325), (21, 60, 325)]
    con.close()


SHAPES = {
    "prefetch half hidden, tensor parallel": TimelineShape(
        iterations=3,
        layers=5,
        kernels_per_layer=3,
        compute_us=150,
        h2d_us=90,
        h2d_hidden_us=45,
        d2h_us=40,
        d2h_hidden_us=32,
        comm_us=30,
        comm_hidden_us=25,
    ),
    "nothing hidden": TimelineShape(
        iterations=2, layers=3, h2d_hidden_us=0, d2h_us=10, d2h_hidden_us=0
    ),
    "everything hidden": TimelineShape(
        iterations=2,
        layers=4,
        h2d_us=100,
        h2d_hidden_us=100,
        d2h_us=50,
        d2h_hidden_us=50,
        comm_us=20,
        comm_hidden_us=20,
    ),
}


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_every_view_reproduces_the_chosen_overlaps(tmp_path, shape):
    expected, ranks = shape.expected(), 2
    con = _ingest(tmp_path, shape, ranks)
    per_iteration = con.execute(
        "SELECT rank, iteration, copy_kind, copy_us, overlapped_us, exposed_us "
        "FROM timeline_copy_overlap"
    ).fetchall()
    assert {
        (kind, copy, hidden, exposed) for _, _, kind, copy, hidden, exposed in per_iteration
    } == {
        (
            "HtoD",
            expected["h2d_copy_us"],
            expected["h2d_overlapped_us"],
            expected["h2d_exposed_us"],
        ),
        (
            "DtoH",
            expected["d2h_copy_us"],
            expected["d2h_overlapped_us"],
            expected["d2h_exposed_us"],
        ),
    }
    assert len(per_iteration) == 2 * ranks * shape.iterations
    windows = con.execute("SELECT DISTINCT window_us FROM timeline_stream_busy").fetchall()
    assert windows == [(expected["iteration_us"],)]
    temporal = con.execute(
        "SELECT DISTINCT kernel_time_us, idle_us, compute_us, "
        "non_compute_us FROM timeline_temporal_breakdown"
    ).fetchall()
    assert temporal == [
        (
            expected["kernel_time_us"],
            expected["idle_time_us"],
            expected["compute_time_us"],
            expected["non_compute_time_us"],
        )
    ]
    kinds = dict(
        con.execute(
            "SELECT kernel_type, sum(total_us) / 2 FROM timeline_kernel_breakdown GROUP BY ALL"
        ).fetchall()
    )
    assert kinds == {
        "computation": expected["compute_time_us"],
        "memory": expected["memory_kernel_us"],
        **({"communication": expected["comm_us"]} if shape.comm_us else {}),
    }
    if shape.comm_us:
        comm = con.execute(
            "SELECT DISTINCT comm_us, overlapped_us FROM timeline_comm_comp_overlap"
        ).fetchall()
        assert comm == [(expected["comm_us"], expected["comm_overlapped_us"])]
    con.close()


def test_an_impossible_shape_is_refused():
    with pytest.raises(ValueError, match="kernel_gap_us"):
        TimelineShape(d2h_us=100, d2h_hidden_us=10, kernel_gap_us=10)
    with pytest.raises(ValueError, match="h2d_hidden_us"):
        TimelineShape(h2d_us=50, h2d_hidden_us=80)
