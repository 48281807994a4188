"""Dataset runners on small local inputs (the ShareGPT file is FastChat's, see tests/data)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtrace.collectors.datasets.ruler import NEEDLE, niah_requests
from kvtrace.collectors.datasets.sharegpt import load_conversations, sharegpt_requests
from kvtrace.collectors.dsa_collect import collect_dsa
from kvtrace.collectors.dsa_ref import ByteTokenizer, DsaRef, DsaRefConfig
from kvtrace.errors import InputError

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
    assert turns[1].prompt.startswith(turns[0].prompt[:-len("Assistant:")])
    assert full[0].prompt == turns[-1].prompt
    assert turns[0].answer == first[0]["conversations"][1]["value"]


def test_turns_of_one_conversation_are_prefix_hits(warehouse):
    conversations, _ = load_conversations(SHAREGPT)
    long_ones = [c for c in conversations if len(c["conversations"]) >= 4][:2]
    requests = list(sharegpt_requests(long_ones, "per_user_turn"))
    config = DsaRefConfig(dim=32, n_layers=1, n_heads=2, index_heads=2, index_dim=8,
                          rope_dim=4, q_lora_rank=16, index_topk=16, max_seq_len=4096)
    collect_dsa(warehouse, requests, model=DsaRef(config), tokenizer=ByteTokenizer(),
                run_name="chat", dataset="sharegpt", max_new_tokens=2, block_sizes=(16,))
    got = warehouse.connect().execute(
        "SELECT request_id, prefix_cache_hit, prefix_cached_tokens FROM requests ORDER BY 1"
    ).fetchall()
    prompts = [ByteTokenizer().encode(r.prompt) for r in requests]

    def shared(a: list[int], b: list[int]) -> int:
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    expected = []
    for i, prompt in enumerate(prompts):
        longest = max((shared(prompt, earlier) for earlier in prompts[:i]), default=0)
        cached = max((n for n in (32, 64, 128, 256) if n <= longest), default=0)
        expected.append((i, cached > 0, cached))
    assert got == expected
    assert any(hit for _, hit, _ in got)  # later turns do share their conversation's prefix


def test_ruler_prompts_hold_their_needles_and_reach_the_length():
    tokenizer = ByteTokenizer()
    requests = list(niah_requests(3, 1500, lambda s: len(tokenizer.encode(s)),
                                  variant="multikey", seed=5))
    for request in requests:
        key = request.meta["key"]
        assert NEEDLE.format(key=key, value=request.answer) in request.prompt
        assert request.prompt.count("One of the special magic numbers") == 4
        assert 1300 < len(tokenizer.encode(request.prompt)) <= 1500
        assert request.prompt.endswith(f"The special magic numbers for {key} mentioned in "
                                       "the provided text are")


def test_a_file_that_is_not_sharegpt_is_refused(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"conversations": []}))
    with pytest.raises(InputError, match="not in ShareGPT format"):
        load_conversations(bad)


def _longbench_record(n: int, length: str) -> dict:
    return {"_id": f"lb{n}", "domain": "Single-Document QA", "sub_domain": "legal",
            "difficulty": "hard", "length": length, "question": f"Which clause {n}?",
            **{f"choice_{c}": f"clause {c}{n}" for c in "ABCD"}, "answer": "C",
            "context": f"Article {n}. " * 40}


def test_longbench_filters_lengths_and_asks_the_choices(tmp_path):
    from kvtrace.collectors.datasets.longbench import load_longbench, longbench_requests

    path = tmp_path / "data.json"
    path.write_text(json.dumps([_longbench_record(i, length) for i, length in
                                enumerate(["short", "long", "medium", "short"])]))
    records, _ = load_longbench(path)
    requests = list(longbench_requests(records, ["short", "medium"]))
    assert [r.meta["id"] for r in requests] == ["lb0", "lb2", "lb3"]
    assert [r.request_id for r in requests] == [0, 1, 2]
    prompt = requests[0].prompt
    assert prompt.index("Article 0.") < prompt.index("Which clause 0?") < prompt.index(
        "(D) clause D0")
    assert requests[0].answer == "C"
    with pytest.raises(InputError, match="unknown LongBench length class"):
        list(longbench_requests(records, ["huge"]))
    (tmp_path / "bad.json").write_text(json.dumps([{"question": "q"}]))
    with pytest.raises(InputError, match="not LongBench v2 data"):
        load_longbench(tmp_path / "bad.json")
