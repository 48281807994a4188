"""The Hugging Face adapter and tokenizer files, on a tiny random Llama built here."""

from __future__ import annotations

import json

import pytest
import torch

from kvtrace import connect
from kvtrace.collectors._dsa_collect import collect_dsa
from kvtrace.collectors._hf_adapter import HfCausalLM
from kvtrace.collectors._tokenizer_file import TokenizerFile
from kvtrace.collectors.datasets import DatasetRequest
from kvtrace.warehouse import Warehouse
from tests.conftest import warehouse_at
from tests.test_cli import kvtrace

WORDS = (
    "the",
    "a",
    "needle",
    "haystack",
    "magic",
    "number",
    "is",
    "one",
    "of",
    "special",
    "for",
    "key",
    "value",
    "grass",
)


def _write_tokenizer(path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "</s>": 1, **{word: i + 2 for i, word in enumerate(WORDS)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(path))


@pytest.fixture
def tiny_llama(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(WORDS) + 2,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    folder = tmp_path / "tiny-llama"
    LlamaForCausalLM(config).save_pretrained(folder)
    _write_tokenizer(folder / "tokenizer.json")
    return folder


def test_tokenizer_file_encodes_and_finds_eos(tmp_path):
    _write_tokenizer(tmp_path / "tokenizer.json")
    tokenizer = TokenizerFile(tmp_path / "tokenizer.json")
    assert tokenizer.encode("the needle zebra") == [2, 4, 0]
    assert (tokenizer.eos_id, tokenizer.vocab_size) == (1, len(WORDS) + 2)


def test_traced_top_k_is_the_head_summed_attention_of_the_last_query(tiny_llama, tmp_path):
    model = HfCausalLM(tiny_llama, index_topk=6)
    tokenizer = TokenizerFile(tiny_llama / "tokenizer.json")
    prompt_text = " ".join(WORDS * 2)
    warehouse = Warehouse(warehouse_at(tmp_path / "wh"), create=True)
    collect_dsa(
        warehouse,
        [DatasetRequest(0, prompt_text)],
        model=model,
        tokenizer=tokenizer,
        run_name="hf",
        dataset="unit",
        block_sizes=(4,),
        max_new_tokens=4,
        scores="full",
    )
    con = connect(warehouse)
    rows = con.execute(
        "SELECT step_idx, layer_id, selected_pos, scores FROM dsa_steps ORDER BY step_idx, layer_id"
    ).fetchall()
    generated = con.execute("SELECT new_tokens FROM requests").fetchone()[0]
    assert generated == 4 and len(rows) == 3 * 3  # 3 traced decode steps x 3 layers
    # Independently: one dense forward over the whole sequence, no cache.
    prompt = tokenizer.encode(prompt_text)
    tokens = list(prompt)
    for _ in range(3):
        logits = model.model(input_ids=torch.tensor([tokens])).logits[0, -1]
        tokens.append(int(logits.argmax()))
    with torch.no_grad():
        attentions = model.model(
            input_ids=torch.tensor([tokens]), output_attentions=True
        ).attentions
    for step, layer, selected, scores in rows:
        summed = attentions[layer][0, :, step, : step + 1].sum(dim=0)
        expected = summed.topk(6)
        assert selected == sorted(expected.indices.tolist())
        by_position = dict(zip(selected, scores, strict=True))
        for position, value in zip(
            expected.indices.tolist(), expected.values.tolist(), strict=True
        ):
            assert by_position[position] == pytest.approx(value, rel=1e-4, abs=1e-6)


def test_collect_cli_runs_a_model_folder_with_its_tokenizer(tiny_llama, tmp_path):
    root = warehouse_at(tmp_path / "wh")
    result = kvtrace(
        "-w",
        str(root),
        "collect",
        "dsa",
        "--model",
        str(tiny_llama),
        "--dataset",
        "ruler",
        "--ruler-length",
        "60",
        "--limit",
        "2",
        "--max-new-tokens",
        "3",
        "--topk",
        "8",
    )
    assert result.returncode == 0, result.stderr
    con = connect(Warehouse(root))
    model, config = con.execute("SELECT model, model_config FROM runs").fetchone()
    assert model == "hf:tiny-llama" and json.loads(config)["num_hidden_layers"] == 3
    assert con.execute("SELECT count(*), max(len(selected_pos)) FROM dsa_steps").fetchone() == (
        2 * 2 * 3,
        8,
    )


def test_missing_tokenizers_and_models_are_one_clear_error(tmp_path):
    root = warehouse_at(tmp_path / "wh")
    missing = kvtrace("-w", root, "collect", "dsa", "--tokenizer", str(tmp_path / "no.json"))
    assert missing.returncode == 1 and missing.stderr.startswith("Error: cannot read ")
    assert len(missing.stderr.splitlines()) == 1
    _write_tokenizer(tmp_path / "tokenizer.json")
    no_model = kvtrace("-w", root, "collect", "dsa", "--model", str(tmp_path))
    assert no_model.returncode == 1
    assert no_model.stderr == f"Error: {tmp_path} is not a model folder (it has no config.json)\n"
