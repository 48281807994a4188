"""Per-KV-group selections: the HF adapter's per-group top-k on a tiny GQA Llama built
here (4 query heads, 2 KV groups), and the dsa_groups views, each against plain Python
over the model's own attention probabilities or over hand-made selections."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from kvtrace import connect
from kvtrace.collectors._dsa_collect import collect_dsa
from kvtrace.collectors._hf_adapter import HfCausalLM
from kvtrace.collectors._tokenizer_file import TokenizerFile
from kvtrace.collectors.datasets import DatasetRequest
from kvtrace.collectors.dsa_tracer import DsaTracer
from kvtrace.warehouse import Warehouse
from tests.collectors.test_hf_adapter import WORDS, tiny_llama  # noqa: F401 (a fixture)
from tests.conftest import warehouse_at
from tests.test_cli import kvtrace

B = 4  # the query-time block size of the checks
TOPK = 6


def _blocks(positions, size: int = B) -> set[int]:
    return {p // size for p in positions}


def _union_rows(selections: dict[tuple, list[int]], seq_len_of: dict[tuple, int], size: int):
    """(key, groups, blocks_in_use, group_density, union_blocks, union_tokens, io_saved,
    compute_saved) per (request, step, layer), by plain loops over the definitions."""
    keys: dict[tuple, list[int]] = {}
    for key in selections:
        keys.setdefault(key[:-1], []).append(key[-1])
    rows = []
    for key in sorted(keys):
        seq_len = seq_len_of[key]
        in_use = -(-seq_len // size)
        union: set[int] = set()
        tokens: set[int] = set()
        densities, selected = [], []
        for group in keys[key]:
            picked = selections[(*key, group)]
            union |= _blocks(picked, size)
            tokens |= set(picked)
            densities.append(len(_blocks(picked, size)) / in_use)
            selected.append(len(picked))
        rows.append(
            (
                key,
                len(keys[key]),
                in_use,
                sum(densities) / len(densities),
                len(union),
                len(tokens),
                1 - len(union) / in_use,
                1 - sum(selected) / len(selected) / seq_len,
            )
        )
    return rows


def _collect_per_group(folder, root, **options):
    model = HfCausalLM(folder, index_topk=TOPK, selection="per-group")
    tokenizer = TokenizerFile(folder / "tokenizer.json")
    prompt_text = " ".join(WORDS * 2)
    warehouse = Warehouse(warehouse_at(root), create=True)
    collect_dsa(
        warehouse,
        [DatasetRequest(0, prompt_text)],
        model=model,
        tokenizer=tokenizer,
        run_name="groups",
        dataset="unit",
        max_new_tokens=4,
        scores="full",
        **options,
    )
    return warehouse, model, tokenizer.encode(prompt_text)


def test_per_group_top_k_is_each_groups_head_summed_attention(tiny_llama, tmp_path):  # noqa: F811
    warehouse, model, prompt = _collect_per_group(tiny_llama, tmp_path / "wh", block_sizes=(B,))
    con = connect(warehouse)
    groups = con.execute(
        "SELECT step_idx, layer_id, kv_group, seq_len, selected_pos, scores FROM dsa_group_steps "
        "ORDER BY step_idx, layer_id, kv_group"
    ).fetchall()
    all_heads = con.execute(
        "SELECT step_idx, layer_id, selected_pos FROM dsa_steps ORDER BY step_idx, layer_id"
    ).fetchall()
    assert len(groups) == 3 * 3 * 2 and len(all_heads) == 3 * 3  # steps x layers (x groups)
    # Independently: a dense forward over the whole sequence, no cache; query head h
    # shares KV head h // 2 (4 heads, 2 KV heads).
    tokens = list(prompt)
    for _ in range(3):
        tokens.append(int(model.model(input_ids=torch.tensor([tokens])).logits[0, -1].argmax()))
    with torch.no_grad():
        attentions = model.model(input_ids=torch.tensor([tokens]), output_attentions=True)
    probs = attentions.attentions
    selections, seq_lens = {}, {}
    for step, layer, group, seq_len, selected, scores in groups:
        heads = [h for h in range(4) if h // 2 == group]
        summed = sum(probs[layer][0, h, step, : step + 1] for h in heads)
        expected = summed.topk(TOPK)
        assert seq_len == step + 1
        assert selected == sorted(expected.indices.tolist())
        by_position = dict(zip(selected, scores, strict=True))
        for position, value in zip(
            expected.indices.tolist(), expected.values.tolist(), strict=True
        ):
            assert by_position[position] == pytest.approx(value, rel=1e-4, abs=1e-6)
        selections[(0, step, layer, group)] = selected
        seq_lens[(0, step, layer)] = seq_len
    for step, layer, selected in all_heads:
        expected = probs[layer][0, :, step, : step + 1].sum(dim=0).topk(TOPK)
        assert selected == sorted(expected.indices.tolist())
    # The views at B = 4, against the same selections.
    density = con.execute(
        f"SELECT step_idx, layer_id, kv_group, blocks_in_use, group_blocks, group_density "
        f"FROM dsa_group_density({B})"
    ).fetchall()
    assert density == [
        (
            key[1],
            key[2],
            key[3],
            -(-seq_lens[key[:3]] // B),
            len(_blocks(picked)),
            pytest.approx(len(_blocks(picked)) / -(-seq_lens[key[:3]] // B)),
        )
        for key, picked in sorted(selections.items())
    ]
    union = con.execute(
        f"SELECT request_id, step_idx, layer_id, groups, blocks_in_use, group_density, "
        f"union_blocks, union_tokens, io_saved, compute_saved FROM dsa_group_union({B})"
    ).fetchall()
    assert union == [
        (
            *key,
            groups,
            in_use,
            pytest.approx(dens),
            ublocks,
            utokens,
            pytest.approx(io),
            pytest.approx(cpu),
        )
        for key, groups, in_use, dens, ublocks, utokens, io, cpu in _union_rows(
            selections, seq_lens, B
        )
    ]
    runs = con.execute("SELECT collector_config, model_config FROM runs").fetchall()
    assert [json.loads(c)["selection"] for c, _ in runs] == ["per-group"]
    assert json.loads(runs[0][1])["num_key_value_heads"] == 2


def test_the_all_heads_collection_stores_no_group_rows(tiny_llama, tmp_path):  # noqa: F811
    model = HfCausalLM(tiny_llama, index_topk=TOPK)
    warehouse = Warehouse(warehouse_at(tmp_path / "wh"), create=True)
    collect_dsa(
        warehouse,
        [DatasetRequest(0, " ".join(WORDS))],
        model=model,
        tokenizer=TokenizerFile(tiny_llama / "tokenizer.json"),
        run_name="all",
        dataset="unit",
        max_new_tokens=3,
    )
    con = connect(warehouse)
    assert con.execute("SELECT count(*) FROM dsa_group_steps").fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM dsa_steps").fetchone() == (2 * 3,)
    (config,) = con.execute("SELECT collector_config FROM runs").fetchone()
    assert json.loads(config)["selection"] == "all-heads"


def _traced(warehouse, selections: dict[tuple, list[int]], block_sizes=(B,)) -> None:
    """Store hand-made group selections, keyed (request, step, layer, group), through the
    tracer (a request's prompt is its first step's position)."""
    tracer = DsaTracer(warehouse, run_name="hand", dataset="unit", topk=3, block_sizes=block_sizes)
    steps: dict[tuple[int, int], list[tuple[int, int, list[int]]]] = {}
    for (request, step, layer, group), picked in sorted(selections.items()):
        steps.setdefault((request, step), []).append((layer, group, picked))
    started = set()
    for (request, step), records in sorted(steps.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if request not in started:
            tracer.begin_request(request, list(range(step)))
            started.add(request)
        with tracer.step({request: step}):
            for layer, group, picked in records:
                tracer.record_topk(layer, np.array(picked), kv_group=group)
    tracer.close()


def test_the_worked_example_of_the_views_header(warehouse):
    _traced(warehouse, {(0, 15, 0, 0): [0, 1, 9], (0, 15, 0, 1): [5, 13, 14]})
    con = connect(warehouse)
    assert con.execute(
        "SELECT kv_group, group_blocks, group_density FROM dsa_group_density(4)"
    ).fetchall() == [(0, 2, 0.5), (1, 2, 0.5)]
    assert con.execute(
        "SELECT seq_len, blocks_in_use, union_blocks, union_density, io_saved, compute_saved "
        "FROM dsa_group_union(4)"
    ).fetchall() == [(16, 4, 4, 1.0, 0.0, pytest.approx(0.8125))]
    assert con.execute("SELECT count(*) FROM dsa_steps").fetchone() == (0,)


@pytest.mark.parametrize("size", [1, 3, 4, 64])
def test_union_and_savings_against_brute_force_on_generated_selections(warehouse, size):
    rng = random.Random(size)
    selections, seq_lens = {}, {}
    for request in range(2):
        for step in range(9 + request, 14 + request):
            for layer in range(2):
                for group in range(rng.choice([1, 3])):
                    k = rng.randint(1, 3)
                    selections[(request, step, layer, group)] = sorted(
                        rng.sample(range(step + 1), k)
                    )
                seq_lens[(request, step, layer)] = step + 1
    selections = {k: v for k, v in selections.items() if k[:3] in seq_lens}
    _traced(warehouse, selections, block_sizes=(4, 16))  # read once, at the smallest
    con = connect(warehouse)
    expected = _union_rows(selections, seq_lens, size)
    got = con.execute(
        f"SELECT request_id, step_idx, layer_id, groups, blocks_in_use, group_density, "
        f"union_blocks, union_tokens, io_saved, compute_saved FROM dsa_group_union({size})"
    ).fetchall()
    assert got == [
        (
            *key,
            groups,
            in_use,
            pytest.approx(dens),
            ublocks,
            utokens,
            pytest.approx(io),
            pytest.approx(cpu),
        )
        for key, groups, in_use, dens, ublocks, utokens, io, cpu in expected
    ]
    savings = con.execute(
        f"SELECT layer_id, steps, groups, group_density, union_density, full_union_share, "
        f"io_saved, compute_saved FROM dsa_group_savings({size})"
    ).fetchall()
    by_layer = []
    for layer in range(2):
        rows = [r for r in expected if r[0][2] == layer]
        n = len(rows)
        by_layer.append(
            (
                layer,
                n,
                max(r[1] for r in rows),
                pytest.approx(sum(r[3] for r in rows) / n),
                pytest.approx(sum(r[4] / r[2] for r in rows) / n),
                pytest.approx(sum(r[4] == r[2] for r in rows) / n),
                pytest.approx(sum(r[6] for r in rows) / n),
                pytest.approx(sum(r[7] for r in rows) / n),
            )
        )
    assert savings == by_layer


def test_per_group_needs_a_hugging_face_model_and_the_cli_takes_it(tiny_llama, tmp_path):  # noqa: F811
    root = warehouse_at(tmp_path / "wh")
    refused = kvtrace("-w", root, "collect", "dsa", "--selection", "per-group", "--limit", "1")
    assert refused.returncode == 1
    assert refused.stderr == (
        "Error: --selection per-group needs a Hugging Face model folder: dsa-ref's indexer "
        "selects once for all heads\n"
    )
    result = kvtrace(
        "-w",
        root,
        "collect",
        "dsa",
        "--model",
        str(tiny_llama),
        "--selection",
        "per-group",
        "--ruler-length",
        "60",
        "--limit",
        "1",
        "--max-new-tokens",
        "3",
        "--topk",
        "8",
    )
    assert result.returncode == 0, result.stderr
    con = connect(Warehouse(root))
    assert con.execute(
        "SELECT count(*), count(DISTINCT kv_group), max(len(selected_pos)) FROM dsa_group_steps"
    ).fetchone() == (2 * 3 * 2, 2, 8)
    assert con.execute("SELECT count(*) FROM dsa_steps").fetchone() == (2 * 3,)


def test_a_warehouse_written_before_kv_groups_reads_and_takes_group_rows(tmp_path):
    import shutil

    from kvtrace.warehouse.ops.migrate import migrate
    from tests.conftest import DATA

    location = tmp_path / "legacy"
    shutil.copytree(DATA / "legacy_warehouse", location)
    migrate(str(location))
    warehouse = Warehouse(str(location))
    con = connect(warehouse)
    assert con.execute("SELECT count(*) FROM dsa_steps").fetchone() == (48,)
    assert con.execute("SELECT count(*) FROM dsa_group_steps").fetchone() == (0,)
    con.close()
    _traced(warehouse, {(0, 15, 0, 0): [0, 1, 9], (0, 15, 0, 1): [5, 13, 14]})
    con = connect(Warehouse(str(location)))
    assert con.execute("SELECT count(*) FROM dsa_steps").fetchone() == (48,)
    assert con.execute("SELECT union_blocks FROM dsa_group_union(4)").fetchall() == [(4,)]


def test_the_histograms_count_the_all_heads_rows_only(warehouse):
    rng = random.Random(7)
    selections = {}
    for step in range(6, 12):
        for group in (None, 0, 1):
            selections[(0, step, 0, group)] = sorted(rng.sample(range(step + 1), 3))
    tracer = DsaTracer(warehouse, run_name="hand", dataset="unit", topk=3, block_sizes=(B,))
    tracer.begin_request(0, list(range(6)))
    for step in range(6, 12):
        with tracer.step({0: step}):
            for group in (None, 0, 1):
                picked = np.array(selections[(0, step, 0, group)])
                tracer.record_topk(0, picked, kv_group=group)
    tracer.close()
    offsets: dict[int, int] = {}
    fills: dict[int, int] = {}
    for (_, step, _, group), picked in selections.items():
        if group is not None:
            continue
        for position in picked:
            offsets[step - position] = offsets.get(step - position, 0) + 1
        for block in {p // B for p in picked}:
            tokens = sum(p // B == block for p in picked)
            fills[tokens] = fills.get(tokens, 0) + 1
    con = connect(warehouse)
    assert dict(con.execute('SELECT "offset", n FROM _dsa_offset_hist_files').fetchall()) == offsets
    assert dict(con.execute("SELECT tokens, n FROM _dsa_fill_hist_files").fetchall()) == fills


def test_group_rows_leave_the_tier_model_as_the_all_heads_rows_alone_would(tmp_path):
    from kvtrace.collectors.kv_tiers import LruTiers

    rng = random.Random(11)
    selections = {
        (step, group): sorted(rng.sample(range(step + 1), 3))
        for step in range(6, 16)
        for group in (None, 0, 1)
    }
    columns = "hbm_blocks, local_pool_blocks, remote_pool_blocks, hbm_bytes_read"

    def traced(name: str, groups: tuple) -> list[tuple]:
        warehouse = Warehouse(str(tmp_path / name), create=True)
        tiers = LruTiers(2, 2, bytes_per_token=2)
        tracer = DsaTracer(
            warehouse, run_name=name, dataset="unit", topk=3, block_sizes=(B,), tier_model=tiers
        )
        tracer.begin_request(0, list(range(6)))
        for step in range(6, 16):
            with tracer.step({0: step}):
                for group in groups:
                    picked = np.array(selections[(step, group)])
                    tracer.record_topk(0, picked, kv_group=group)
        tracer.close()
        return (
            connect(warehouse)
            .execute(
                f"SELECT kv_group, {columns} FROM _dsa_steps_files ORDER BY step_idx, kv_group"
            )
            .fetchall()
        )

    alone = traced("alone", (None,))
    grouped = traced("grouped", (None, 0, 1))
    assert [row for row in grouped if row[0] is None] == alone
    assert {row[1:] for row in grouped if row[0] is not None} == {(None,) * 4}
    assert {row[3] for row in alone} != {0}  # the model sent blocks to the remote pool
