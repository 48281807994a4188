"""The public tracing API: kvtrace.trace / kvtrace.record_topk, batched torch rows,
prefill chunks, ranks and their agreement, the writer's bounded backlog, Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

import kvtrace
from kvtrace import connect
from kvtrace.collectors._dsa_record import Backlog
from kvtrace.errors import InputError
from kvtrace.warehouse import Warehouse
from kvtrace.warehouse.ops.integrity import check
from kvtrace.warehouse.ops.maintenance import leftovers
from tests.conftest import warehouse_at


def _decode_rows(con, run_name=None):
    where = (
        ""
        if run_name is None
        else f"WHERE run_id IN (SELECT run_id FROM runs WHERE run_name = '{run_name}')"
    )
    return {
        (r, s, layer): positions
        for r, s, layer, positions in con.execute(
            f"SELECT request_id, step_idx, layer_id, selected_pos FROM dsa_steps {where}"
        ).fetchall()
    }


def test_record_topk_reports_to_the_open_trace_only(warehouse):
    kvtrace.record_topk(0, np.arange(4))  # no trace open: nothing happens
    assert kvtrace.trace.__module__ == "kvtrace.collectors.tracing"
    with kvtrace.trace(warehouse, run_name="api", dataset="unit") as tracer:
        assert isinstance(tracer, kvtrace.DsaTracer)
        with pytest.raises(InputError, match="already open"):
            kvtrace.trace(warehouse, run_name="second")
        tracer.begin_request(0, [5, 6, 7])
        kvtrace.record_topk(0, np.arange(3))  # outside a step: ignored
        with tracer.step(3):
            kvtrace.record_topk(0, np.array([2, 0, 3]))
            kvtrace.record_topk(0, np.array([1]), kv_group=1)
        tracer.end_request(0, new_tokens=1)
    kvtrace.record_topk(0, np.arange(4))  # closed: nothing happens
    con = connect(warehouse)
    assert _decode_rows(con) == {(0, 3, 0): [0, 2, 3]}
    assert con.execute("SELECT kv_group, selected_pos FROM dsa_group_steps").fetchall() == [
        (1, [1])
    ]


def test_a_folder_is_created_and_batched_torch_rows_map_to_the_step_requests(tmp_path):
    location = warehouse_at(tmp_path / "new")
    rng = np.random.default_rng(3)
    prompts = {10: 40, 11: 57, 12: 33}
    expected = {}
    with kvtrace.trace(location, run_name="batch", dataset="unit", block_sizes=(8,)) as tracer:
        for request, prompt in prompts.items():
            tracer.begin_request(request, list(range(prompt)))
        for step in range(3):
            starts = {r: prompt + step for r, prompt in prompts.items()}
            with tracer.step(starts):
                for layer in range(2):
                    picks = np.full((3, 16), -1, dtype=np.int64)  # -1 pads, as indexers do
                    for row, (request, start) in enumerate(starts.items()):
                        width = int(rng.integers(1, 17))
                        picks[row, :width] = rng.choice(start + 1, width, replace=False)
                        expected[(request, start, layer)] = sorted(picks[row, :width].tolist())
                    shaped = torch.from_numpy(picks)
                    if layer == 1:  # [batch, 1, k], as a model's [bsz, seqlen, k] comes
                        shaped = shaped[:, None, :]
                    kvtrace.record_topk(layer, shaped, torch.rand(shaped.shape))
                    picks[:] = 0  # an engine reusing its buffer changes nothing recorded
    assert _decode_rows(connect(location)) == expected


def _topk_row(rng, candidates, k):
    """Distinct positions below ``candidates``, some replaced by -1 padding."""
    row = np.full(k, -1)
    width = min(k, candidates)
    row[:width] = rng.choice(candidates, width, replace=False)
    row[rng.random(k) < 0.2] = -1
    return row


def _step_parts(prompts, done, chunk):
    """Each request's (start, tokens) in the next step: a chunk of its prompt, or decode."""
    return {
        request: (done[request], max(min(chunk, prompt - done[request]), 0) or 1)
        for request, prompt in prompts.items()
    }


def _step_picks(rng, parts, prompts, k, selected, layer):
    """The step's top-k rows for one layer, noted in ``selected`` by query position."""
    picks = np.full((sum(tokens for _, tokens in parts.values()), k), -1)
    row = 0
    for request, (start, tokens) in parts.items():
        beyond = 4 if start < prompts[request] else 0  # a masked top-k's picks past the query
        for i in range(tokens):
            picks[row + i] = _topk_row(rng, start + i + 1 + beyond, k)
            selected[(request, start, layer, start + i)] = picks[row + i]
        row += tokens
    return picks


def _prefill_run(warehouse, run_name, *, prefill, seed=0):
    """Chunked prefill of three requests mixed with decode steps; the masked top-k picks
    positions after a query's own (as a causal mask over a full top-k does), and -1 pads.
    Returns what each (request, chunk start, layer, query position) row selected."""
    rng = np.random.default_rng(seed)
    prompts = {0: 21, 1: 9, 2: 14}
    done = dict.fromkeys(prompts, 0)  # positions computed so far
    selected = {}
    with kvtrace.trace(
        warehouse, run_name=run_name, dataset="unit", prefill=prefill, block_sizes=(4,)
    ) as tracer:
        for request, prompt in prompts.items():
            tracer.begin_request(request, list(range(100 * request, 100 * request + prompt)))
        for _ in range(8):
            parts = _step_parts(prompts, done, chunk=6)
            with tracer.step(parts):
                for layer in range(3):
                    picks = _step_picks(rng, parts, prompts, 5, selected, layer)
                    kvtrace.record_topk(layer, torch.from_numpy(picks))
            done = {request: start + tokens for request, (start, tokens) in parts.items()}
    return prompts, selected


def _brute_force(prompts, selected):
    """Decode rows, and per prefill chunk its end and how often each position was picked
    by its queries (0 <= pos <= the query's own position)."""
    chunks: dict[tuple[int, int, int], dict[int, int]] = {}
    ends: dict[tuple[int, int, int], int] = {}
    decode = {}
    for (request, start, layer, query), picks in selected.items():
        if start >= prompts[request]:  # a decode step (one token past the prompt)
            decode[(request, start, layer)] = sorted({int(p) for p in picks if p >= 0})
            continue
        counts = chunks.setdefault((request, start, layer), {})
        for p in (int(p) for p in picks if 0 <= p <= query):
            counts[p] = counts.get(p, 0) + 1
        ends[(request, start, layer)] = max(ends.get((request, start, layer), 0), query + 1)
    return decode, chunks, ends


def _blocks_expected(chunks, ends, block_size):
    return {
        (r, s, layer): (
            ends[(r, s, layer)] - s,
            sum(counts.values()),
            len({p // block_size for p in counts}),
            -(-ends[(r, s, layer)] // block_size),
        )
        for (r, s, layer), counts in chunks.items()
    }


def test_prefill_chunks_hold_each_query_s_picks_and_decode_is_unchanged(tmp_path):
    location = warehouse_at(tmp_path / "wh")
    prompts, selected = _prefill_run(location, "with", prefill=True)
    _prefill_run(location, "without", prefill=False)
    con = connect(Warehouse(location))
    decode, chunks, ends = _brute_force(prompts, selected)
    got = con.execute(
        "SELECT request_id, query_start, layer_id, query_end, selected_pos, select_count "
        "FROM dsa_prefill"
    ).fetchall()
    assert {(r, s, layer): (end, pos, n) for r, s, layer, end, pos, n in got} == {
        key: (ends[key], sorted(counts), [counts[p] for p in sorted(counts)])
        for key, counts in chunks.items()
    }
    assert _decode_rows(con, "with") == decode == _decode_rows(con, "without")
    for block_size in (1, 4, 7):
        blocks = con.execute(
            "SELECT request_id, query_start, layer_id, queries, selections, unique_blocks, "
            "total_blocks_in_use FROM dsa_prefill_blocks(?)",
            [block_size],
        ).fetchall()
        got_blocks = {(r, s, layer): tuple(rest) for r, s, layer, *rest in blocks}
        assert got_blocks == _blocks_expected(chunks, ends, block_size)


def test_only_rank_zero_traces_unless_every_rank_is_asked_for(warehouse):
    silent = kvtrace.DsaTracer(warehouse, run_name="tp", dataset="unit", rank=1, world_size=2)
    silent.begin_request(0, [1, 2])
    with silent.step(2):
        silent.record_topk(0, np.arange(3))
    silent.end_request(0)
    silent.close()
    assert connect(warehouse).execute("SELECT count(*) FROM runs").fetchone() == (0,)


def _trace_rank(warehouse, rank, picks, changed, dropped):
    """Rank ``rank`` of two traces ``picks``; rank 1 selects otherwise at ``changed`` and
    records nothing at ``dropped``.  Returns what it recorded."""
    recorded = {}
    tracer = kvtrace.DsaTracer(
        warehouse, run_name="tp2", dataset="unit", rank=rank, world_size=2, all_ranks=True
    )
    for request in range(2):
        tracer.begin_request(request, list(range(30)))
        for step in range(30, 34):
            with tracer.step({request: step}):
                for layer in range(3):
                    key = (request, step, layer)
                    chosen = picks[key].copy()
                    if rank == 1 and key in changed:
                        chosen[0] = min(set(range(step + 1)) - set(chosen.tolist()))
                    if rank == 1 and key in dropped:
                        continue
                    recorded[key] = sorted(set(chosen.tolist()))
                    tracer.record_topk(layer, chosen)
        tracer.end_request(request)
    tracer.close()
    return recorded


def _disagreements(picks, zero, one):
    """Brute force: rank 0 holds every row, so it is the reference everywhere."""
    expected = {}
    for key in picks:
        missing = [] if key in one else [1]
        differs = [1] if not missing and one[key] != zero[key] else []
        if missing or differs:
            expected[key] = ([0, 1], 0, missing, differs)
    return expected


def test_disagreeing_ranks_are_reported_row_by_row(warehouse):
    rng = np.random.default_rng(7)
    picks = {
        (request, step, layer): rng.choice(step + 1, 6, replace=False)
        for request in range(2)
        for step in range(30, 34)
        for layer in range(3)
    }
    changed = {(0, 31, 2), (1, 33, 0)}
    dropped = {(1, 32, 1)}
    zero, one = (_trace_rank(warehouse, rank, picks, changed, dropped) for rank in (0, 1))
    expected = _disagreements(picks, zero, one)
    con = connect(warehouse)
    ranks = con.execute("SELECT rank, world_size FROM runs ORDER BY rank").fetchall()
    assert ranks == [(0, 2), (1, 2)]
    got = con.execute("FROM dsa_rank_disagreements").fetchall()
    assert {(r, s, layer): tuple(rest) for _, r, s, layer, *rest in got} == expected
    assert len(expected) == 3  # whatever the draw, the two changes and the drop


def test_the_backlog_holds_the_model_back_when_the_writer_falls_behind():
    backlog = Backlog(limit_bytes=100)
    backlog.put("a", 60)
    second = threading.Thread(target=backlog.put, args=("b", 60))
    second.start()
    while not backlog._changed._waiters:  # the second put waits for room
        pass
    assert backlog.get(timeout=0) == (True, "a")
    second.join()
    assert backlog.waited_s > 0
    assert backlog.get(timeout=0) == (True, "b")
    backlog.put("big", 1000)  # one step over the limit still goes when nothing waits
    assert backlog.get(timeout=0) == (True, "big")
    assert backlog.get(timeout=0) == (False, None)


INTERRUPTED = """
import sys, time
import numpy as np
import kvtrace

with kvtrace.trace(sys.argv[1], run_name="ctrl-c", dataset="unit", block_sizes=(8,)) as tracer:
    tracer.begin_request(0, list(range(50)))
    for step in range(50, 60):
        with tracer.step(step):
            for layer in range(4):
                kvtrace.record_topk(layer, np.arange(0, step + 1, 1 + layer))
                if step == 55 and layer == 2:
                    print("inside step 55", flush=True)
                    while True:
                        time.sleep(0.01)
"""


def test_ctrl_c_inside_a_step_commits_every_completed_step(tmp_path):
    location = warehouse_at(tmp_path / "wh")
    proc = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED, location],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=os.getcwd(),
    )
    assert proc.stdout.readline().strip() == "inside step 55"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    warehouse = Warehouse(location)
    con = connect(warehouse)
    got = con.execute(
        "SELECT step_idx, layer_id, selected_pos FROM dsa_steps ORDER BY 1, 2"
    ).fetchall()
    assert got == [
        (step, layer, list(range(0, step + 1, 1 + layer)))
        for step in range(50, 55)
        for layer in range(4)
    ]
    assert con.execute("SELECT status FROM requests").fetchall() == [("interrupted",)]
    assert check(warehouse).healthy
    assert not leftovers(warehouse)


def test_the_prefill_view_s_worked_example(warehouse):
    with kvtrace.trace(warehouse, run_name="example", prefill=True) as tracer:
        tracer.begin_request(0, list(range(12)))
        with tracer.step({0: 8}, query_tokens=4):  # queries 8 .. 11, k = 3
            kvtrace.record_topk(0, np.array([[0, 8, -1], [0, 1, 9], [0, 10, 15], [1, 11, -1]]))
    con = connect(warehouse)
    assert con.execute("SELECT selected_pos, select_count FROM dsa_prefill").fetchall() == [
        ([0, 1, 8, 9, 10, 11], [3, 2, 1, 1, 1, 1])
    ]
    row = con.execute(
        "SELECT queries, selected, selections, selections_per_query, unique_blocks, "
        "total_blocks_in_use, round(touched_block_ratio, 3), selections_per_block_mean "
        "FROM dsa_prefill_blocks(4)"
    ).fetchone()
    assert row == (4, 6, 9, 2.25, 2, 3, 0.667, 4.5)
    with pytest.raises(Exception, match="block size must be a positive number"):
        con.execute("FROM dsa_prefill_blocks(0)").fetchall()


def test_layers_of_one_step_may_ask_for_different_k(warehouse):
    with kvtrace.trace(warehouse, run_name="widths", scores="full") as tracer:
        first = tracer.begin_request(None, list(range(10)))
        second = tracer.begin_request(None, list(range(12)))
        assert (first, second) == (0, 1)
        with tracer.step({first: 10, second: 12}):
            kvtrace.record_topk(0, torch.tensor([[1, 5, 10], [0, 12, -1]]), torch.ones(2, 3))
            kvtrace.record_topk(1, torch.tensor([[9, 8, 7, 6, 5], [4, 3, 2, 1, 0]]))
    rows = connect(warehouse).execute(
        "SELECT request_id, layer_id, selected_pos, scores FROM dsa_steps ORDER BY 1, 2"
    )
    assert rows.fetchall() == [
        (0, 0, [1, 5, 10], None),
        (0, 1, [5, 6, 7, 8, 9], None),
        (1, 0, [0, 12], None),
        (1, 1, [0, 1, 2, 3, 4], None),
    ]
