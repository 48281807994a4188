"""Dataset runners on small local inputs (the ShareGPT file is FastChat's, see tests/data)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtrace import connect
from kvtrace.collectors._dsa_collect import collect_dsa
from kvtrace.collectors.datasets.ruler import NEEDLE, niah_requests
from kvtrace.collectors.datasets.sharegpt import load_conversations, sharegpt_requests
from kvtrace.collectors.dsa_ref import ByteTokenizer, DsaRef, DsaRefConfig
from kvtrace.errors import InputError
from tests.conftest import warehouse_at

SHAREGPT = Path(__file__).parent.parent / "data" / "sharegpt_format_dummy_conversation.json"


def test_sharegpt_modes_follow_the_human_turns():
    conversations, sha = load_conversations(SHAREGPT)
    assert len(conversations) == 500 and len(sha) == 64
    first = conversations[:3]
    humans = sum(m["from"] == "human" for c in first for m in c["conversations"])
    per_turn = list(sharegpt_requests(first, "per_user_turn"))
    full = list(sharegpt_requests(first, "full"))
    assert len(per_turn) == humans and len(full) == 3
    assert [r.request_id for r in per_turn] == list(range(humans))
    turns = [r for r in per_turn if r.meta["conversation"] == first[0]["id"]]
    assert turns[1].prompt.startswith(turns[0].prompt[: -len("Assistant:")])
    assert full[0].prompt == turns[-1].prompt
    assert turns[0].answer == first[0]["conversations"][1]["value"]


def test_turns_of_one_conversation_are_prefix_hits(warehouse):
    conversations, _ = load_conversations(SHAREGPT)
    long_ones = [c for c in conversations if len(c["conversations"]) >= 4][:2]
    requests = list(sharegpt_requests(long_ones, "per_user_turn"))
    config = DsaRefConfig(
        dim=32,
        n_layers=1,
        n_heads=2,
        index_heads=2,
        index_dim=8,
        rope_dim=4,
        q_lora_rank=16,
        index_topk=16,
        max_seq_len=4096,
    )
    collect_dsa(
        warehouse,
        requests,
        model=DsaRef(config),
        tokenizer=ByteTokenizer(),
        run_name="chat",
        dataset="sharegpt",
        max_new_tokens=2,
        block_sizes=(16,),
    )
    got = (
        connect(warehouse)
        .execute(
            "SELECT request_id, prefix_cache_hit, prefix_cached_tokens FROM requests ORDER BY 1"
        )
        .fetchall()
    )
    prompts = [ByteTokenizer().encode(r.prompt) for r in requests]

    # the seed's rule: candidates 32, 64, ... and min(len, 256) itself; the longest one an
    # earlier miss registered is the hit
    registered: set[tuple[int, ...]] = set()
    expected = []
    for i, prompt in enumerate(prompts):
        region = min(len(prompt), 256)
        candidates = {n for n in (32, 64, 128, 256) if n <= region} | {region}
        cached = max((n for n in candidates if tuple(prompt[:n]) in registered), default=0)
        if cached == 0:
            registered.update(tuple(prompt[:n]) for n in candidates)
        expected.append((i, cached > 0, cached))
    assert got == expected
    assert any(hit for _, hit, _ in got)  # later turns share their conversation's prefix


def test_ruler_prompts_hold_their_needles_and_reach_the_length():
    tokenizer = ByteTokenizer()
    requests = list(
        niah_requests(3, 1500, lambda s: len(tokenizer.encode(s)), variant="multikey", seed=5)
    )
    for request in requests:
        key = request.meta["key"]
        assert NEEDLE.format(key=key, value=request.answer) in request.prompt
        assert request.prompt.count("One of the special magic numbers") == 4
        assert 1300 < len(tokenizer.encode(request.prompt)) <= 1500
        assert request.prompt.endswith(
            f"The special magic numbers for {key} mentioned in the provided text are"
        )


def test_a_file_that_is_not_sharegpt_is_refused(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"conversations": []}))
    with pytest.raises(InputError, match="not in ShareGPT format"):
        load_conversations(bad)


def _longbench_record(n: int, length: str) -> dict:
    return {
        "_id": f"lb{n}",
        "domain": "Single-Document QA",
        "sub_domain": "legal",
        "difficulty": "hard",
        "length": length,
        "question": f"Which clause {n}?",
        **{f"choice_{c}": f"clause {c}{n}" for c in "ABCD"},
        "answer": "C",
        "context": f"Article {n}. " * 40,
    }


def test_longbench_filters_lengths_and_asks_the_choices(tmp_path):
    from kvtrace.collectors.datasets.longbench import load_longbench, longbench_requests

    path = tmp_path / "data.json"
    path.write_text(
        json.dumps(
            [
                _longbench_record(i, length)
                for i, length in enumerate(["short", "long", "medium", "short"])
            ]
        )
    )
    records, _ = load_longbench(path)
    requests = list(longbench_requests(records, ["short", "medium"]))
    assert [r.meta["id"] for r in requests] == ["lb0", "lb2", "lb3"]
    assert [r.request_id for r in requests] == [0, 1, 2]
    prompt = requests[0].prompt
    assert (
        prompt.index("Article 0.") < prompt.index("Which clause 0?") < prompt.index("(D) clause D0")
    )
    assert requests[0].answer == "C"
    with pytest.raises(InputError, match="unknown LongBench length class"):
        list(longbench_requests(records, ["huge"]))
    (tmp_path / "bad.json").write_text(json.dumps([{"question": "q"}]))
    with pytest.raises(InputError, match="not LongBench v2 data"):
        load_longbench(tmp_path / "bad.json")


AZURE = Path(__file__).parent.parent / "data" / "azure_llm_inference_code.csv"


def test_arrival_traces_read_the_azure_file_fifo():
    from kvtrace.collectors.datasets.burstgpt import load_arrivals

    arrivals, sha = load_arrivals(AZURE)
    assert len(arrivals) == 8819 and len(sha) == 64
    assert arrivals[0].arrival_s == 0.0
    times = [a.arrival_s for a in arrivals]
    assert times == sorted(times)
    assert arrivals[0].prompt_tokens > 0 and [a.request_id for a in arrivals[:3]] == [0, 1, 2]


def test_replayed_arrivals_record_fifo_latency_and_the_serving_summary(warehouse, tmp_path):
    import numpy as np

    from kvtrace.analysis.summary import run_summary
    from kvtrace.collectors._dsa_collect import replay_arrivals
    from kvtrace.collectors.datasets.burstgpt import load_arrivals

    trace = tmp_path / "burst.csv"
    trace.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5.0,ChatGPT,120,3,123,Conversation log\n"
        "0.0,ChatGPT,100,2,102,Conversation log\n"
        "0.0,GPT-4,90,4,94,Conversation log\n"
        "0.5,ChatGPT,2000,2,2002,Conversation log\n"
    )
    arrivals, _ = load_arrivals(trace)
    config = DsaRefConfig(
        dim=32,
        n_layers=2,
        n_heads=2,
        index_heads=2,
        index_dim=8,
        rope_dim=4,
        q_lora_rank=16,
        index_topk=16,
        max_seq_len=1024,
    )
    report = replay_arrivals(
        warehouse,
        arrivals,
        model=DsaRef(config),
        tokenizer=ByteTokenizer(),
        run_name="burst",
        dataset="burstgpt",
        batch_size=2,
        block_sizes=(16,),
        max_new_tokens=3,
        max_prompt_tokens=500,
    )
    assert (report.requests, report.skipped) == (3, 1)
    con = connect(warehouse)
    rows = con.execute(
        "SELECT request_id, prompt_tokens, new_tokens, arrival_s, finish_s, "
        "latency_ms, status FROM requests ORDER BY request_id"
    ).fetchall()
    served = [r for r in rows if r[6] == "ok"]
    assert [(r[0], r[1], r[2], r[3]) for r in served] == [
        (0, 100, 2, 0.0),
        (1, 90, 3, 0.0),
        (3, 120, 3, 5.0),
    ]
    assert rows[2][6] == "skipped" and rows[2][1] == 2000
    finishes = [r[4] for r in served]
    assert finishes == sorted(finishes) and all(r[4] > r[3] for r in served)
    assert served[2][4] > 5.0  # the model waited for the late arrival
    latencies = [r[5] for r in served]
    assert latencies == pytest.approx([(r[4] - r[3]) * 1000 for r in served])
    summary = run_summary(con, "burst")
    assert summary["serving"]["requests"] == 3
    assert summary["serving"]["batch_size"] == 2
    assert summary["serving"]["latency_ms"]["p95"] == pytest.approx(np.quantile(latencies, 0.95))


def _ruler_lines(task: str, count: int) -> str:
    return "".join(
        json.dumps(
            {
                "index": i,
                "input": f"{task} haystack {i}. What is it?",
                "outputs": [str(1000 + i)],
                "length": 12,
            }
        )
        + "\n"
        for i in range(count)
    )


def test_ruler_reads_its_prepared_jsonl_and_tgz_files(tmp_path):
    import io
    import tarfile

    from kvtrace.collectors.datasets.ruler import load_ruler_file, ruler_requests

    single = tmp_path / "niah_single_1.jsonl"
    single.write_text(_ruler_lines("single", 2) + "\n")
    records, sha = load_ruler_file(single)
    requests = list(ruler_requests(records))
    assert [(r.request_id, r.prompt, r.answer, r.meta["task"]) for r in requests] == [
        (0, "single haystack 0. What is it?", "1000", "niah_single_1"),
        (1, "single haystack 1. What is it?", "1001", "niah_single_1"),
    ]
    assert len(sha) == 64
    archive = tmp_path / "ruler.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        for task, count in (("niah_multikey_2", 1), ("niah_single_1", 2)):
            data = _ruler_lines(task, count).encode()
            info = tarfile.TarInfo(f"data/{task}/validation.jsonl")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    tasks = [r.meta["task"] for r in ruler_requests(load_ruler_file(archive)[0])]
    assert tasks == ["niah_multikey_2", "niah_single_1", "niah_single_1"]
    (tmp_path / "bad.jsonl").write_text('{"input": "ok"}\n{oops\n')
    with pytest.raises(InputError, match=r"bad\.jsonl line 2 is not valid JSON"):
        load_ruler_file(tmp_path / "bad.jsonl")
    (tmp_path / "other.jsonl").write_text('{"text": "no input"}\n')
    with pytest.raises(InputError, match="is not RULER data"):
        load_ruler_file(tmp_path / "other.jsonl")


def test_hf_datasets_load_through_the_datasets_library(tmp_path):
    from tests.test_cli import kvtrace

    folder = tmp_path / "longbench"
    folder.mkdir()
    (folder / "data.json").write_text(
        json.dumps(
            [_longbench_record(i, length) for i, length in enumerate(["short", "long", "short"])]
        )
    )
    root = warehouse_at(tmp_path / "wh")
    result = kvtrace(
        "-w",
        root,
        "collect",
        "dsa",
        "--dataset",
        "longbench-v2",
        "--hf-dataset",
        str(folder),
        "--length",
        "short",
        "--layers",
        "1",
        "--max-new-tokens",
        "2",
        "--limit",
        "5",
    )
    assert result.returncode == 0, result.stderr
    variant = kvtrace(
        "-w", root, "sql", "SELECT dataset_variant FROM runs", "--format", "csv"
    ).stdout.splitlines()[1]
    assert variant.startswith(f'"{folder} (split train, revision default, fingerprint ')
    assert variant.endswith(', lengths short"')
    served = kvtrace("-w", root, "sql", "SELECT count(*) FROM requests", "--format", "csv")
    assert served.stdout.splitlines()[1] == "2"
    missing = kvtrace(
        "-w",
        root,
        "collect",
        "dsa",
        "--dataset",
        "ruler",
        "--hf-dataset",
        str(tmp_path / "nowhere"),
    )
    assert missing.returncode == 1
    assert missing.stderr.startswith(f"Error: cannot load dataset '{tmp_path / 'nowhere'}'")
    assert len(missing.stderr.splitlines()) == 1
    both = kvtrace("-w", root, "collect", "dsa", "--data-file", "x", "--hf-dataset", "y")
    assert both.stderr == "Error: give --data-file or --hf-dataset, not both\n"


def test_batched_collection_traces_what_one_at_a_time_does(tmp_path):
    from kvtrace.warehouse import Warehouse

    config = DsaRefConfig(
        dim=32,
        n_layers=2,
        n_heads=2,
        index_heads=2,
        index_dim=8,
        rope_dim=4,
        q_lora_rank=16,
        index_topk=24,
        max_seq_len=1024,
    )
    tokenizer = ByteTokenizer()
    prompts = list(niah_requests(5, 200, lambda t: len(tokenizer.encode(t)), seed=3))
    picked = {}
    for batch in (1, 2):
        warehouse = Warehouse(tmp_path / f"wh{batch}", create=True)
        report = collect_dsa(
            warehouse,
            prompts,
            model=DsaRef(config),
            tokenizer=tokenizer,
            run_name="b",
            dataset="ruler",
            block_sizes=(16,),
            max_new_tokens=4,
            batch_size=batch,
        )
        assert (report.requests, report.new_tokens) == (5, 20)
        picked[batch] = (
            connect(warehouse)
            .execute(
                "SELECT request_id, step_idx, layer_id, selected_pos FROM dsa_steps ORDER BY ALL"
            )
            .fetchall()
        )
    assert len(picked[1]) == 5 * 3 * 2 and picked[2] == picked[1]


def test_the_registry_names_every_runner_and_rejects_others(warehouse):
    from kvtrace.collectors.collect_options import DatasetName, DsaCollectOptions
    from kvtrace.collectors.datasets.registry import DATASETS, dataset_requests

    assert set(DATASETS) == set(DatasetName.__args__)
    with pytest.raises(InputError, match="expected one of ruler, sharegpt"):
        dataset_requests(
            DsaCollectOptions(dataset="mmlu"),
            ByteTokenizer(),  # type: ignore
            warehouse,
        )
    with pytest.raises(InputError, match="burstgpt needs --data-file"):
        dataset_requests(DsaCollectOptions(dataset="burstgpt"), ByteTokenizer(), warehouse)
    requests, variant = dataset_requests(
        DsaCollectOptions(dataset="ruler", limit=2, ruler_length=600, seed=3),
        ByteTokenizer(),
        warehouse,
    )
    assert len(list(requests)) == 2
    assert variant == "ruler-niah-single (kvtrace offline generator, seed 3, 600 tokens)"
