"""The tracer hook: what it received is what the warehouse holds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from kvtrace import connect
from kvtrace.collectors.dsa_tracer import DsaTracer, prefix_hashes
from kvtrace.errors import InputError, WarehouseError
from kvtrace.warehouse import Warehouse
from tests.conftest import warehouse_at


def _trace(warehouse, *, requests=2, steps=3, layers=4, k=48, prompt=200, seed=0, **options):
    """Drive the tracer like a model would; return what record_topk received."""
    rng = np.random.default_rng(seed)
    received = {}
    tracer = DsaTracer(
        warehouse, run_name=options.pop("run_name", "live"), dataset="unit", topk=k, **options
    )
    for request in range(requests):
        tracer.begin_request(request, list(range(prompt + request)))
        for step in range(steps):
            start = prompt + request + step
            with tracer.step(start):
                for layer in range(layers):
                    picked = rng.choice(start + 1, k, replace=False)
                    scores = rng.normal(size=k).astype(np.float32)
                    received[(request, start, layer)] = (picked, scores)
                    tracer.record_topk(layer, picked, scores)
        tracer.end_request(
            request, new_tokens=steps, token_ids=[10_000 + request * 100 + i for i in range(steps)]
        )
    tracer.close()
    return received


def test_views_agree_with_the_indices_the_hook_received(warehouse):
    received = _trace(warehouse, block_sizes=(16, 64), scores="full")
    con = connect(warehouse)
    for block_size in (16, 64):
        rows = con.execute(
            "SELECT request_id, step_idx, layer_id, selected_pos, scores, unique_blocks "
            "FROM dsa_steps WHERE block_size = ?",
            [block_size],
        ).fetchall()
        assert len(rows) == len(received)
        operations = con.execute("SELECT DISTINCT operation FROM warehouse_commits").fetchall()
        assert operations == [("collect",)]  # the journal labels collections as such
        for request, step, layer, positions, scores, unique in rows:
            picked, given = received[(request, step, layer)]
            order = np.argsort(picked)
            assert positions == sorted(picked.tolist())
            assert np.allclose(scores, given[order])
            assert unique == len(np.unique(picked // block_size))
    steps = con.execute("SELECT DISTINCT seq_len - step_idx, topk FROM dsa_steps").fetchall()
    assert steps == [(1, 48)]
    for request, step, layer, block_size, touched in con.execute(
        "SELECT request_id, step_idx, layer_id, block_size, touched_blocks FROM dsa_steps"
    ).fetchall():
        picked, _ = received[(request, step, layer)]
        assert touched == sorted(set((picked // block_size).tolist()))
    requests = con.execute(
        "SELECT request_id, prompt_tokens, new_tokens FROM requests ORDER BY 1"
    ).fetchall()
    assert requests == [(0, 200, 3), (1, 201, 3)]
    assert con.execute("SELECT source, kind FROM runs").fetchall() == [("collect", "dsa")]


def test_token_ids_and_step_times_are_recorded(warehouse):
    before = time.time() * 1e6
    _trace(warehouse, requests=2, steps=3, prompt=50)
    after = time.time() * 1e6
    con = connect(warehouse)
    tokens = con.execute(
        "SELECT request_id, prompt_tokens, token_ids FROM dsa_request_tokens ORDER BY request_id"
    ).fetchall()
    assert tokens == [
        (r, 50 + r, list(range(50 + r)) + [10_000 + r * 100 + i for i in range(3)]) for r in (0, 1)
    ]
    times = con.execute(
        "SELECT batch_step, min(ts_us), max(ts_us) FROM dsa_steps GROUP BY batch_step "
        "ORDER BY batch_step"
    ).fetchall()
    assert [t[1] for t in times] == [t[2] for t in times]  # one time per step
    stamps = [t[1] for t in times]
    assert before <= stamps[0] and stamps == sorted(stamps) and stamps[-1] <= after


def test_layer_subset_sampling_and_score_stats(warehouse):
    tracer_received = {}
    rng = np.random.default_rng(1)
    tracer = DsaTracer(
        warehouse, run_name="subset", dataset="unit", layers=[0, 2], sample_rate=0.5, seed=3
    )
    tracer.begin_request(7, list(range(300)))
    for step in range(300, 340):
        with tracer.step(step):
            for layer in range(4):
                picked = rng.choice(step + 1, 32, replace=False)
                scores = rng.normal(size=32)
                tracer_received[(step, layer)] = scores
                tracer.record_topk(layer, picked, scores)
    tracer.end_request(7)
    tracer.close()
    rows = (
        connect(warehouse)
        .execute(
            "SELECT step_idx, layer_id, score_min, score_mean, score_max, scores FROM dsa_steps"
        )
        .fetchall()
    )
    assert {layer for _, layer, *_ in rows} == {0, 2}
    assert 20 < len(rows) < 60  # about half of 80 records
    for step, layer, low, mean, high, full in rows:
        given = tracer_received[(step, layer)]
        assert full is None
        assert (low, mean, high) == pytest.approx(
            (given.min(), given.mean(), given.max()), rel=1e-6
        )


def test_padding_is_dropped_and_batched_steps_map_rows_to_requests(warehouse):
    tracer = DsaTracer(warehouse, run_name="batch", dataset="unit", topk=4)
    tracer.begin_request(10, [1, 2, 3])
    tracer.begin_request(11, [1, 2, 3, 4, 5])
    with tracer.step({10: 3, 11: 5}):
        tracer.record_topk(0, np.array([[3, 0, 2, -1], [5, 4, 1, 0]]))
    tracer.end_request(10)
    tracer.end_request(11)
    tracer.close()
    rows = (
        connect(warehouse)
        .execute("SELECT request_id, step_idx, selected_pos FROM dsa_steps ORDER BY 1")
        .fetchall()
    )
    assert rows == [(10, 3, [0, 2, 3]), (11, 5, [0, 1, 4, 5])]


def test_prefix_hits_use_the_longest_shared_candidate():
    base = list(range(1000))
    assert set(prefix_hashes(base)) == {32, 64, 128, 256}
    assert prefix_hashes(base[:100]).keys() == {32, 64, 100}  # the prompt's own length too
    assert prefix_hashes(base[:20]).keys() == {20}  # a short prompt still has a key


def test_shared_prefixes_become_hits_with_their_cached_length(warehouse):
    tracer = DsaTracer(warehouse, run_name="prefix", dataset="unit", block_sizes=(16,))
    shared = list(range(5000, 5300))
    short = list(range(7000, 7020))
    prompts = {
        0: shared + [1] * 50,
        1: shared + [2] * 60,
        2: shared[:70] + [3] * 300,
        3: short,
        4: list(short),
        # shares 128 tokens with request 1 only: a hit registers nothing, and
        # request 0 registered 128 too, so this hits at 128 through request 0
        5: shared[:128] + [5] * 10,
    }
    for request, prompt in prompts.items():
        tracer.begin_request(request, prompt)
        with tracer.step(len(prompt)):
            tracer.record_topk(0, np.arange(0, len(prompt), 7))
        tracer.end_request(request)
    tracer.close()
    con = connect(warehouse)
    got = con.execute(
        "SELECT request_id, prefix_cache_hit, prefix_cached_tokens FROM requests ORDER BY 1"
    ).fetchall()
    # request 4 hits request 3's 20-token key (the old rule gave short prompts no key)
    assert got == [
        (0, False, 0),
        (1, True, 256),
        (2, True, 64),
        (3, False, 0),
        (4, True, 20),
        (5, True, 128),
    ]
    region = dict(con.execute("SELECT request_id, prefix_region_tokens FROM requests").fetchall())
    assert region == {0: 256, 1: 256, 2: 64, 3: 20, 4: 20, 5: 128}
    rows = con.execute(
        "SELECT request_id, prefix_cache_hit, intersection_blocks FROM dsa_prefix(16)"
    ).fetchall()
    inter = {request: (hit, blocks) for request, hit, blocks in rows}
    selected = {r: {p // 16 for p in range(0, len(prompt), 7)} for r, prompt in prompts.items()}
    # every row is intersected: a miss with its own key region, ceil(tokens / 16) blocks
    assert inter[0] == (False, sorted(b for b in selected[0] if b < 16))
    assert inter[1] == (True, sorted(b for b in selected[1] if b < 16))
    assert inter[2] == (True, sorted(b for b in selected[2] if b < 4))
    assert inter[3] == (False, sorted(b for b in selected[3] if b < 2))  # 20 tokens: 2 blocks


def test_two_tracer_processes_writing_to_one_warehouse_lose_nothing(tmp_path):
    root = warehouse_at(tmp_path / "wh")
    Warehouse(root, create=True)
    script = (
        "import sys\n"
        "from kvtrace.warehouse import Warehouse\n"
        "from tests.collectors.test_dsa_tracer import _trace\n"
        "_trace(Warehouse(sys.argv[1]), run_name=sys.argv[2], requests=3, steps=4, layers=8,"
        " seed=int(sys.argv[3]), rank=int(sys.argv[3]), world_size=2, all_ranks=True,"
        " commit_every_s=0.01)\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(root), "shared", str(rank)], cwd=os.getcwd()
        )
        for rank in (0, 1)
    ]
    assert [p.wait() for p in procs] == [0, 0]
    con = connect(Warehouse(root))
    assert con.execute("SELECT count(*) FROM dsa_steps").fetchone() == (2 * 3 * 4 * 8,)
    ranks = con.execute("SELECT run_name, rank, run_id FROM runs ORDER BY rank").fetchall()
    assert [(name, rank) for name, rank, _ in ranks] == [("shared", 0), ("shared", 1)]
    assert ranks[0][2] != ranks[1][2]
    assert con.execute("SELECT count(DISTINCT (run_id, request_id)) FROM requests").fetchone() == (
        2 * 3,
    )


def test_rank_and_world_size_default_to_the_torchrun_environment(warehouse, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    _trace(warehouse, requests=1, steps=1, layers=1, all_ranks=True)
    con = connect(warehouse)
    assert con.execute("SELECT rank, world_size FROM runs").fetchall() == [(3, 4)]
    monkeypatch.setenv("RANK", "4")
    with pytest.raises(InputError, match="outside a world of size 4"):
        DsaTracer(warehouse, run_name="bad", dataset="unit")


def test_a_killed_collector_leaves_a_readable_warehouse(tmp_path):
    root = warehouse_at(tmp_path / "wh")
    Warehouse(root, create=True)
    script = (
        "import sys, time\n"
        "import numpy as np\n"
        "from kvtrace.collectors.dsa_tracer import DsaTracer\n"
        "from kvtrace.warehouse import Warehouse\n"
        "tracer = DsaTracer(Warehouse(sys.argv[1]), run_name='doomed', dataset='unit',"
        " commit_every_s=0.05)\n"
        "tracer.begin_request(0, list(range(100)))\n"
        "for step in range(100, 100000):\n"
        "    with tracer.step(step):\n"
        "        tracer.record_topk(0, np.arange(0, step, 3))\n"
        "    if step == 150: print('running', flush=True)\n"
        "    time.sleep(0.002)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(root)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "running"
    import time

    deadline = time.monotonic() + 60  # the first commit may wait for a cold numba cache
    while _version(root) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # and the collector goes on writing: killed mid-batch
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    con = connect(Warehouse(root))
    steps = con.execute("SELECT count(*), min(step_idx) FROM dsa_steps").fetchone()
    assert steps[0] > 0 and steps[1] == 100
    assert con.execute(
        "SELECT count(*) FROM dsa_quality WHERE check_name = 'duplicate_row'"
    ).fetchone() == (0,)


def test_default_tiers_serve_every_block_from_hbm(warehouse):
    from kvtrace.collectors.kv_tiers import HbmOnly

    _trace(
        warehouse,
        requests=1,
        steps=2,
        layers=2,
        block_sizes=(16,),
        tier_model=HbmOnly(bytes_per_token=656),
    )
    rows = (
        connect(warehouse)
        .execute(
            "SELECT unique_blocks, hbm_blocks, hbm_bytes_read, hbm_read_ops, hbm_hit_blocks, "
            "local_pool_blocks, remote_pool_blocks, remote_pool_hit_blocks FROM dsa_steps"
        )
        .fetchall()
    )
    assert rows and all(r == (r[0], r[0], r[0] * 16 * 656, 1, None, 0, 0, None) for r in rows)


def test_an_lru_tier_model_splits_blocks_over_the_tiers(warehouse):
    from kvtrace.collectors.kv_tiers import LruTiers, TierCost

    tiers = LruTiers(
        hbm_blocks=2,
        local_blocks=2,
        bytes_per_token=2,
        costs={"remote_pool": TierCost(op_latency_us=10, block_latency_us=1)},
    )
    tracer = DsaTracer(
        warehouse, run_name="tiers", dataset="unit", block_sizes=(16,), tier_model=tiers
    )
    tracer.begin_request(0, list(range(60)))
    with tracer.step(60):  # blocks 0, 1, 2: all cold, read remotely
        tracer.record_topk(0, np.array([0, 16, 32]))
    with tracer.step(61):  # HBM holds 1, 2 and the local pool 0: 0 and 1 local, 3 remote
        tracer.record_topk(0, np.array([0, 16, 48]))
    tracer.end_request(0)
    tracer.close()
    rows = (
        connect(warehouse)
        .execute(
            "SELECT hbm_blocks, local_pool_hit_blocks, remote_pool_hit_blocks, "
            "remote_pool_bytes_read, remote_pool_latency_us FROM dsa_steps ORDER BY step_idx"
        )
        .fetchall()
    )
    assert rows == [(0, None, [0, 1, 2], 3 * 16 * 2, 13.0), (0, [0, 1], [3], 16 * 2, 11.0)]


def test_a_failing_writer_stops_the_next_step_not_only_close(warehouse, monkeypatch):
    import time

    from kvtrace.collectors import dsa_tracer

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dsa_tracer.DsaWriter, "add", full_disk)
    tracer = DsaTracer(warehouse, run_name="full", dataset="unit", block_sizes=(16,))
    tracer.begin_request(0, list(range(40)))
    with tracer.step(40):
        tracer.record_topk(0, np.array([1, 2, 3]))
    deadline = time.monotonic() + 10
    with pytest.raises(dsa_tracer.WriterFailed, match="No space left"):
        while time.monotonic() < deadline:  # the writer thread takes the step in its time
            with tracer.step(41):
                tracer.record_topk(0, np.array([1, 2]))
            time.sleep(0.05)
    with pytest.raises(OSError):
        tracer.close()


def test_a_writer_failing_at_the_last_commit_is_raised_by_close_without_hanging(
    warehouse, monkeypatch
):
    import threading

    from kvtrace.collectors import dsa_tracer

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dsa_tracer.DsaWriter, "finish", full_disk)
    tracer = DsaTracer(warehouse, run_name="full", dataset="unit", block_sizes=(16,))
    tracer.begin_request(0, list(range(40)))
    with tracer.step(40):
        tracer.record_topk(0, np.array([1, 2, 3]))
    raised: list[BaseException] = []

    def close() -> None:
        try:
            tracer.close()
        except BaseException as exc:
            raised.append(exc)

    closer = threading.Thread(target=close, daemon=True)
    closer.start()
    closer.join(timeout=30)
    assert not closer.is_alive(), "close() hangs when the final commit fails"
    assert len(raised) == 1 and "No space left" in str(raised[0])
    assert connect(warehouse).execute("SELECT count(*) FROM dsa_steps").fetchone() == (0,)


def _version(location: str) -> int:
    """The warehouse's version, 0 while it does not exist yet."""
    try:
        return Warehouse(location).version
    except WarehouseError:
        return 0


def test_collecting_twice_under_one_name_makes_two_runs_never_one_key_twice(warehouse, cli):
    _trace(warehouse, run_name="again")
    _trace(warehouse, run_name="again", seed=1)
    con = connect(warehouse)
    runs = con.execute("SELECT run_id, run_name FROM runs ORDER BY 1").fetchall()
    assert len(runs) == 2 and {name for _, name in runs} == {"again"}
    doubled = con.execute(
        "SELECT count(*) FROM (SELECT run_id, request_id, step_idx, layer_id, block_size "
        "FROM dsa_steps GROUP BY ALL HAVING count(*) > 1)"
    ).fetchone()
    assert doubled == (0,)
    per_run = con.execute("SELECT run_id, count(*) FROM dsa_steps GROUP BY 1").fetchall()
    assert sorted(count for _, count in per_run) == [24, 24]
    status, out, err = cli("-w", warehouse.location, "summary", "--run", "again")
    assert status == 1 and "2 runs are named 'again'" in err
    assert all(run_id in err for run_id, _ in runs)
    status, out, _ = cli(
        "-w", warehouse.location, "summary", "--run", runs[0][0], "--block-size", "64"
    )
    assert status == 0 and json.loads(out)["rows"] == 24


KERNELS_AFTER_LOADING = """
import importlib, json, pkgutil, sys
import numpy as np
from numba.core.registry import CPUDispatcher
import kvtrace.kernels
from kvtrace.collectors.dsa_tracer import DsaTracer
from kvtrace.warehouse import Warehouse

def compiled():
    kernels = {}
    for info in pkgutil.iter_modules(kvtrace.kernels.__path__):
        module = importlib.import_module(f"kvtrace.kernels.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, CPUDispatcher):
                kernels[f"{info.name}.{name}"] = sorted(map(str, value.signatures))
    return kernels

rng = np.random.default_rng(0)
warehouse = Warehouse(sys.argv[1], create=True)
tracers = [
    DsaTracer(warehouse, run_name=scores, dataset="unit", topk=48, scores=scores,
              block_sizes=(16, 64))
    for scores in ("stats", "full")
]
loaded = compiled()
for tracer in tracers:
    tracer.begin_request(0, list(range(200)))
    for start in range(200, 204):
        with tracer.step(start):
            for layer in range(3):
                picked = rng.choice(start + 1, 48, replace=False)
                tracer.record_topk(layer, picked, rng.normal(size=48).astype(np.float32))
    tracer.end_request(0, new_tokens=4)
    tracer.close()
print(json.dumps({"loaded": loaded, "after": compiled()}))
"""


def test_a_tracer_loads_its_kernels_before_decoding_starts(tmp_path):
    """Loading a compiled kernel holds the GIL; a kernel first loaded at the writer's
    first batch would stall the model's thread mid-decode.  In a fresh process, tracing
    with tracers already made loads no further kernel or signature."""
    result = subprocess.run(
        [sys.executable, "-c", KERNELS_AFTER_LOADING, str(tmp_path / "wh")],
        capture_output=True,
        text=True,
        check=True,
    )
    kernels = json.loads(result.stdout)
    assert kernels["after"] == kernels["loaded"]
    assert kernels["loaded"]["list_checks.scan_rows"]  # the check sees the kernels at all
