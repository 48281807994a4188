"""Vidur's operator profiles (the vidur-profile family, operator_profiles), the work,
MFU and roofline views over them, the GPU peak table, and kv_layouts' models.

The files under tests/data/vidur/ are rows of Vidur's published profiles
(github.com/microsoft/vidur, MIT): compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv and
network/a100_dgx/{all_reduce,send_recv}.csv at commit 7d47513, a100/attention.csv
(Llama-2-70B's shape) at e2d00e9 and a100/cpu_overheads.csv at 6d98aa8, the earlier
data/profiling/<gpu>/ layout.  Every expected figure below is worked by hand from those
rows and the formulas of operator_profiles.sql's header.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvtrace import connect
from kvtrace.analysis.kv_layouts import KNOWN_AS, LAYOUTS, bytes_per_token, layout_named
from kvtrace.errors import QueryError
from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse
from tests.conftest import DATA

A100_80GB_FLOPS = 312e12  # the A100 datasheet's dense BF16 tensor figure
A100_80GB_BYTES = 2039e9  # its 80 GB SXM bandwidth


@pytest.fixture
def profiles(warehouse: Warehouse, tmp_path: Path) -> Warehouse:
    """The excerpts ingested from a copy of Vidur's folder layout."""
    folder = shutil.copytree(DATA / "vidur", tmp_path / "profiling")
    report = ingest(warehouse, [str(folder)])
    assert report.rows == 40 + 15 + 18 + 3 + 3
    return warehouse


def rows(warehouse: Warehouse, sql: str) -> list[tuple]:
    return connect(warehouse).execute(sql).fetchall()


def test_an_mlp_row_becomes_one_row_per_operator_with_its_shape_and_times(profiles):
    # mlp.csv's first data row: Meta-Llama-3-8B at 32,768 tokens, TP 1; its mlp_up_proj
    # columns read 30.8, 33.42, 33.0155, 33.094, 0.5334732889283209
    found = rows(
        profiles,
        "SELECT device, model, n_embd, n_head, n_kv_head, n_expanded_embd, vocab_size, "
        "use_gated_mlp, tensor_parallel, num_tokens, time_min_ms, time_max_ms, "
        "time_mean_ms, time_median_ms, time_std_ms FROM operator_profiles "
        "WHERE source = 'mlp' AND row_idx = 0 AND operator = 'mlp_up_proj'",
    )
    assert found == [
        (
            "a100",
            "meta-llama/Meta-Llama-3-8B",
            4096,
            32,
            8,
            14336,
            128256,
            True,
            1,
            32768,
            30.8,
            33.42,
            33.0155,
            33.094,
            0.5334732889283209,
        )
    ]
    operators = rows(
        profiles,
        "SELECT list(operator ORDER BY operator) FROM operator_profiles "
        "WHERE source = 'mlp' AND row_idx = 0",
    )[0][0]
    assert operators == sorted(
        [
            "emb",
            "input_layernorm",
            "attn_pre_proj",
            "attn_rope",
            "attn_post_proj",
            "post_attention_layernorm",
            "mlp_up_proj",
            "mlp_act",
            "mlp_down_proj",
            "add",
        ]
    )
    tokens = rows(
        profiles,
        "SELECT row_idx, num_tokens, tensor_parallel FROM operator_profiles "
        "WHERE source = 'mlp' AND operator = 'add' ORDER BY row_idx",
    )
    assert tokens == [(0, 32768, 1), (1, 4096, 1), (2, 1, 1), (3, 4096, 2)]


def test_an_attention_row_keeps_only_the_operators_it_times(profiles):
    # a decode row leaves attn_prefill's five columns empty, a prefill row attn_decode's
    found = rows(
        profiles,
        "SELECT row_idx, is_prefill, batch_size, prefill_chunk_size, kv_cache_size, "
        "list(operator ORDER BY operator) FROM operator_profiles WHERE source = 'attention' "
        "GROUP BY ALL ORDER BY row_idx",
    )
    reshapes = ["attn_input_reshape", "attn_output_reshape"]
    assert found == [
        (0, False, 1, 0, 32, sorted(["attn_decode", *reshapes])),
        (1, False, 64, 0, 2688, sorted(["attn_decode", *reshapes])),
        (2, True, 1, 3840, 128, sorted(["attn_prefill", *reshapes])),
        (3, True, 1, 4096, 0, sorted(["attn_prefill", *reshapes])),
        (4, True, 1, 4096, 0, sorted(["attn_prefill", *reshapes])),
    ]
    shape = rows(
        profiles,
        "SELECT DISTINCT device, model, n_embd, n_head, n_kv_head, tensor_parallel, "
        "block_size, max_model_len, backend FROM operator_profiles WHERE source = 'attention'",
    )
    assert shape == [("a100", None, 8192, 64, 8, 2, 16, 4096, "AttentionBackend.FLASH_ATTENTION")]


def test_collectives_and_cpu_overheads_keep_their_sizes(profiles):
    collectives = rows(
        profiles,
        "SELECT operator, device, model, size_bytes, num_workers, devices_per_node, "
        "max_devices_per_node, rank, time_median_ms FROM operator_profiles "
        "WHERE source = 'collectives' ORDER BY operator, row_idx",
    )
    assert collectives == [
        ("all_reduce", "a100_dgx", None, 2048, 8, 8, 8, 0, 0.062),
        ("all_reduce", "a100_dgx", None, 8388608, 8, 8, 8, 0, 0.155),
        ("all_reduce", "a100_dgx", None, 16777216, 8, 8, 8, 0, 0.275),
        ("send_recv", "a100_dgx", None, 2048, 2, 1, 8, 0, 0.024),
        ("send_recv", "a100_dgx", None, 16777216, 2, 1, 8, 0, 2.205),
        ("send_recv", "a100_dgx", None, 2048, 2, 2, 8, 0, 0.008),
    ]
    # cpu_overheads: mean and median only, ray_comm_time a mean alone; the model from
    # the model_name column
    cpu = rows(
        profiles,
        "SELECT model, batch_size, tensor_parallel, operator, time_mean_ms, time_median_ms, "
        "time_min_ms FROM operator_profiles WHERE source = 'cpu_overheads' "
        "AND operator IN ('schedule', 'ray_comm_time') ORDER BY batch_size, operator",
    )
    llama = "meta-llama/Llama-2-7b-hf"
    assert cpu == [
        (llama, 8, 1, "ray_comm_time", 0.22040716915701827, None, None),
        (llama, 8, 1, "schedule", 0.16414020016478995, 0.15551686131708756, None),
        (llama, 128, 1, "ray_comm_time", 1.0049048253832875, None, None),
        (llama, 128, 1, "schedule", 2.0137258967303713, 2.0482786121223775, None),
    ]


def test_a_gemm_rows_flops_bytes_mfu_and_roofline(profiles):
    # mlp_up_proj of Meta-Llama-3-8B at 32,768 tokens, TP 1: a GEMM of m = 32,768 by
    # k = 4,096 by n = 2 x 14,336 (gated) = 28,672, median 33.094 ms
    m, k, n = 32768, 4096, 28672
    flops = 2 * m * k * n  # 7,696,581,394,432
    moved = (m * k + k * n + m * n) * 2  # 2,382,364,672
    seconds = 33.094e-3
    found = rows(
        profiles,
        "SELECT w.gemm_m, w.gemm_k, w.gemm_n, r.flops, r.bytes, r.mfu, "
        "r.arithmetic_intensity, r.bound, r.roofline_ms, r.roofline_share, "
        "r.attainable_flops_per_s FROM operator_roofline('A100-80GB') AS r "
        "JOIN operator_work AS w USING (run_id, source, device, model, row_idx, operator) "
        "WHERE operator = 'mlp_up_proj' AND r.size = 32768",
    )
    assert len(found) == 1
    gm, gk, gn, f, b, mfu, ai, bound, roof_ms, share, attainable = found[0]
    assert (gm, gk, gn, f, b) == (m, k, n, flops, moved)
    assert f == 7_696_581_394_432 and b == 2_382_364_672
    assert mfu == pytest.approx(flops / seconds / A100_80GB_FLOPS)  # 0.7454
    assert mfu == pytest.approx(0.7454, abs=1e-4)
    assert ai == pytest.approx(flops / moved) == pytest.approx(3230.65, abs=0.01)  # > 153.0
    assert bound == "compute" and attainable == A100_80GB_FLOPS
    assert roof_ms == pytest.approx(flops / A100_80GB_FLOPS * 1e3)  # 24.67 ms
    assert share == pytest.approx(roof_ms / 33.094)


def test_attention_rows_flops_bytes_and_bound(profiles):
    # Llama-2-70B's shape at TP 2: d = 8,192 / 64 = 128, 32 query and 4 KV heads a worker
    hq, hkv, d = 32, 4, 128
    # decode: 64 sequences at 2,688 cached tokens, median 0.281 ms
    b, p = 64, 2688
    decode_flops = 4 * b * hq * d * (p + 1)  # 2,819,620,864
    decode_bytes = b * (2 * hq * d + 2 * (p + 1) * hkv * d) * 2  # 353,501,184
    # full prefill of 4,096 tokens, nothing cached (the first of the two such rows: 2.314)
    c = 4096
    prefill_flops = 4 * hq * d * (c * 0 + c * (c + 1) // 2)  # 137,472,507,904
    prefill_bytes = (2 * c * hq * d + 2 * c * hkv * d) * 2  # 75,497,472
    # chunked prefill: 3,840 new tokens over 128 cached, median 2.095 ms
    c2, p2 = 3840, 128
    chunk_flops = 4 * hq * d * (c2 * p2 + c2 * (c2 + 1) // 2)
    chunk_bytes = (2 * c2 * hq * d + 2 * (p2 + c2) * hkv * d) * 2
    found = rows(
        profiles,
        "SELECT row_idx, operator, size, size_unit, flops, bytes, bound, roofline_ms, "
        "achieved_bytes_per_s, mfu FROM operator_roofline('a100-80gb') "
        "WHERE operator IN ('attn_decode', 'attn_prefill') AND row_idx IN (1, 2, 3) "
        "ORDER BY row_idx",
    )
    assert [row[:7] for row in found] == [
        (1, "attn_decode", 64 * 2689, "kv tokens", decode_flops, decode_bytes, "memory"),
        (2, "attn_prefill", 3840, "new tokens", chunk_flops, chunk_bytes, "compute"),
        (3, "attn_prefill", 4096, "new tokens", prefill_flops, prefill_bytes, "compute"),
    ]
    assert decode_flops == 2_819_620_864 and decode_bytes == 353_501_184
    assert prefill_flops == 137_472_507_904 and prefill_bytes == 75_497_472
    decode, _, prefill = found
    assert decode[7] == pytest.approx(decode_bytes / A100_80GB_BYTES * 1e3)  # 0.1734 ms
    assert decode[8] == pytest.approx(decode_bytes / 0.281e-3)  # 1.258e12 bytes/s
    assert decode[9] == pytest.approx(decode_flops / 0.281e-3 / A100_80GB_FLOPS)  # 0.032
    assert prefill[7] == pytest.approx(prefill_flops / A100_80GB_FLOPS * 1e3)
    assert prefill[9] == pytest.approx(prefill_flops / 2.314e-3 / A100_80GB_FLOPS)  # 0.190


def test_element_wise_operators_are_bound_by_memory_and_collectives_by_their_bus(profiles):
    # mlp_act of a gated MLP at 4,096 tokens, TP 2: reads 2 x 7,168 and writes 7,168
    # values a token: 3 x 4,096 x 7,168 x 2 bytes; no FLOPs counted
    act = rows(
        profiles,
        "SELECT flops, bytes, bound, roofline_ms FROM operator_roofline('a100-80gb') "
        "WHERE operator = 'mlp_act' AND tensor_parallel = 2",
    )
    moved = 3 * 4096 * 7168 * 2
    assert act == [(None, moved, "memory", pytest.approx(moved / A100_80GB_BYTES * 1e3))]
    # all_reduce of 16 MiB over 8 ranks in 0.275 ms: algorithm bandwidth size / time,
    # bus bandwidth x 2 (8 - 1) / 8
    bus = rows(
        profiles,
        "SELECT achieved_bytes_per_s, bus_bytes_per_s FROM operator_work "
        "WHERE operator = 'all_reduce' AND size = 16777216",
    )
    algbw = 16777216 / 0.275e-3  # 61.0 GB/s
    assert bus == [(pytest.approx(algbw), pytest.approx(algbw * 14 / 8))]  # 106.8 GB/s
    # collectives and CPU steps are no GPU operators of the roofline
    sources = rows(profiles, "SELECT DISTINCT source FROM operator_roofline('h100-sxm')")
    assert sorted(sources) == [("attention",), ("mlp",)]


def test_the_peak_table_has_a_source_for_every_gpu_and_an_unknown_gpu_is_one_sentence(
    profiles, cli
):
    peaks = dict(
        (gpu, (flops, bandwidth, ridge, source))
        for gpu, flops, bandwidth, ridge, source in rows(
            profiles,
            "SELECT gpu, dense_flops_per_s, memory_bytes_per_s, ridge_flops_per_byte, source "
            "FROM gpu_peaks",
        )
    )
    assert {"a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "l40s"} <= set(peaks)
    assert all(source.startswith("https://") for *_, source in peaks.values())
    # H100 SXM: 1,979 sparse TFLOP/s halved, 3.35 TB/s: ridge 295.4 FLOP/byte
    assert peaks["h100-sxm"][:2] == (989.5e12, 3350e9)
    assert peaks["h100-sxm"][2] == pytest.approx(295.37, abs=0.01)
    status, _, err = cli(
        "-w", str(profiles.location), "sql", "SELECT * FROM operator_roofline('a10g')"
    )
    assert status != 0
    assert "no peak figures for GPU 'a10g'; gpu_peaks knows a10, a100-40gb" in err
    assert "Traceback" not in err


def test_bad_values_go_to_the_quarantine_and_the_rest_is_read(warehouse, tmp_path):
    source = DATA / "vidur/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv"
    lines = source.read_text().splitlines()
    fields = lines[2].split(",")
    fields[0] = "fast"  # emb's min is not a number
    lines[2] = ",".join(fields)
    fields = lines[3].split(",")
    fields[-3] = "Maybe"  # use_gated_mlp
    lines[3] = ",".join(fields)
    folder = tmp_path / "compute/a100/meta-llama/Meta-Llama-3-8B"
    folder.mkdir(parents=True)
    (folder / "mlp.csv").write_text("\n".join(lines) + "\n")
    report = ingest(warehouse, [str(folder / "mlp.csv")])
    assert report.rows == 2 * 10  # the two good rows, ten operators each
    assert rows(warehouse, "SELECT line_no, reason FROM quarantine ORDER BY line_no") == [
        (3, "time_stats.emb.min is not a number"),
        (4, "use_gated_mlp is not True or False"),
    ]


def test_a_csv_that_is_no_profile_is_one_sentence_with_kind(cli, tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    status, _, err = cli("-w", str(tmp_path / "wh"), "ingest", "--kind", "vidur-profile", str(path))
    assert status != 0
    assert "is not a Vidur operator profile: its header has the columns of none of" in err
    assert "Traceback" not in err


def test_kv_layouts_know_llama_3_1_3_2_and_3_3_by_their_hugging_face_names():
    # layers x KV heads x head size x 2 (K, V) x 2 bytes, from each config.json
    assert bytes_per_token("llama-3.1-8b") == 32 * 8 * 128 * 4 == 131072
    assert bytes_per_token("meta-llama/Llama-3.1-405B") == 126 * 8 * 128 * 4
    assert bytes_per_token("Llama-3.2-1B-Instruct") == 16 * 8 * 64 * 4 == 32768
    assert bytes_per_token("meta-llama/Llama-3.2-3B") == 28 * 8 * 128 * 4
    assert bytes_per_token("meta-llama/Llama-3.3-70B-Instruct") == 80 * 8 * 128 * 4
    assert bytes_per_token("Meta-Llama-3-8B") == bytes_per_token("llama-3-8b")  # Vidur's name
    assert layout_named("llama-3.2-1b").source == (
        "https://huggingface.co/meta-llama/Llama-3.2-1B/blob/main/config.json"
    )
    with pytest.raises(QueryError, match=r"^no KV layout is known for 'llama-9'; known: "):
        bytes_per_token("llama-9")


def test_kv_layouts_agree_with_kvcache_simulator_on_every_model_both_know():
    calculator = pytest.importorskip(
        "kvcache_sim.calculator", reason="kvcache-simulator (a test extra) is not installed"
    )
    data = calculator.load_models_data()
    theirs = calculator.models_by_id(data)
    compared = []
    for layout in LAYOUTS:
        model = theirs.get(KNOWN_AS.get(layout.name, layout.name))
        if model is None or layout.name == "deepseek-v3.2":
            continue  # deepseek-v3.2: FlashMLA's FP8 layout, the calculator's is BF16
        size = calculator.calculate_cache_size(
            model,
            tokens=1024,
            precision="bf16_fp16",
            indexer_precision=None,
            block_size=512,
            include_draft_kv_cache=False,
            include_linear_attention_state=False,
            models_data=data,
        )
        assert layout.bytes_per_token == size.bytes_per_token, layout.name
        compared.append(layout.name)
    assert len(compared) >= 20
    assert {"llama-3.1-8b", "llama-3.1-70b", "llama-3.3-70b"} <= set(compared)
