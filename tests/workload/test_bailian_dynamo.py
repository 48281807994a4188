"""Bailian (Qwen) traces, Dynamo's Agentic Mooncake v2 and Weka traces, and mooncake-delta
sessions: rows worked by hand from the test files, local block hashes made global, the
delta expansion, bad input quarantined with one sentence, and the prefix views on them.

Formats as their projects document them: alibaba-edu/qwen-bailian-usagetraces-anon
README.md (commit 03a51e31); ai-dynamo/dynamo ``docs/dynosim/trace-formats.md`` and
``docs/agents/agent-replay.md`` (commit f6de2946), its Weka importer
``lib/data-gen/src/weka.rs`` and the Agentic Mooncake v2 header of its AISimulate guide;
the two Weka files are ai-dynamo/aiperf's ``tests/unit/graph/fixtures`` (commit 58028d5b).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.conftest import DATA, warehouse_at

WORKLOAD = DATA / "workload"
BAILIAN = WORKLOAD / "bailian_documented.jsonl"
AGENTIC = WORKLOAD / "dynamo" / "agentic_mooncake_v2.jsonl"
WEKA_SUBAGENT = WORKLOAD / "dynamo" / "weka_subagent.json"
WEKA_ANCHOR = WORKLOAD / "dynamo" / "weka_start_anchor.json"
DELTA = WORKLOAD / "dynamo" / "mooncake_delta.jsonl"

COLUMNS = (
    "arrival_s, input_tokens, output_tokens, hash_ids, hash_block_tokens, session_id, turn, "
    "request_type, parent_id, request_key"
)


def _rows(warehouse, path: Path, **options) -> list[tuple]:
    ingest(warehouse, [str(path)], **options)
    run = path.name.split(".")[0]
    return (
        connect(warehouse)
        .execute(
            f"SELECT {COLUMNS} FROM workload_requests WHERE run_id LIKE ? "
            "ORDER BY arrival_s, request_idx",
            [f"{run}%"],
        )
        .fetchall()
    )


# -- an independent SplitMix64 over Python integers, for the expected global ids -----------

MASK = (1 << 64) - 1


def _global(local: int, scope: str) -> int:
    """SplitMix64's finaliser of ``local ^ salt``, the salt the scope's BLAKE2b digest."""
    salt = int.from_bytes(hashlib.blake2b(scope.encode(), digest_size=8).digest(), "little")
    z = (local & MASK) ^ salt
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    z ^= z >> 31
    return z - (1 << 64) if z >= 1 << 63 else z


def _weka_scope(path: Path) -> str:
    """A whole-document Weka file's scope: its text's 16-byte BLAKE2b digest, line 1."""
    return f"{hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()}:1"


# -- Bailian ------------------------------------------------------------------------------------


def test_bailian_rows_by_hand(warehouse):
    # timestamp is seconds already; 16-token blocks; session = root of the parent chain:
    # chats 0 -> 2 -> 3 are session "0", 1 -> 6 session "1"; chat 5's parent 77 is not in
    # the file, so the chain stops there and 77 names the session
    assert _rows(warehouse, BAILIAN) == [
        (0.0, 40, 12, [0, 1, 2], 16, "0", 1, "text", None, "0"),
        (0.5, 20, 30, [3, 4], 16, "1", 1, "search", None, "1"),
        (3.25, 70, 8, [0, 1, 5, 6, 7], 16, "0", 2, "text", "0", "2"),
        (9.0, 100, 16, [0, 1, 5, 6, 8, 9, 10], 16, "0", 3, "text", "2", "3"),
        (9.5, 16, 4, [11], 16, "4", 1, "image", None, "4"),
        (10.0, 33, 5, [12, 13, 14], 16, "77", 4, "file", "77", "5"),
        (12.5, 50, 20, [3, 4, 15, 16], 16, "1", 2, "search", "1", "6"),
    ]


def test_bailian_prefix_reuse_by_hand(warehouse):
    ingest(warehouse, [str(BAILIAN)])
    # blocks read in arrival order: 3 + 2 + 5 + 7 + 1 + 3 + 4 = 25, 17 distinct; seen
    # before: chat 2 reads 0, 1 (2), chat 3 reads 0, 1, 5, 6 (4), chat 6 reads 3, 4 (2):
    # 8, each a leading run.  Hit tokens min(blocks x 16, input): 32, 64, 32 over 7 requests
    row = (
        connect(warehouse)
        .sql(
            "SELECT requests, blocks, distinct_blocks, seen_blocks, hit_requests, "
            "prefix_hit_share, mean_hit_tokens FROM workload_prefix_reuse"
        )
        .fetchall()
    )
    assert row == [(7, 25, 17, 8, 3, pytest.approx(8 / 25), pytest.approx(128 / 7))]


def test_a_session_is_the_root_of_its_chain_whatever_the_line_order(warehouse, tmp_path):
    # the child before its parent and grandparent: the session is still the root, 10
    lines = [
        {"chat_id": 12, "parent_chat_id": 11, "timestamp": 3.0, "turn": 3},
        {"chat_id": 10, "parent_chat_id": -1, "timestamp": 1.0, "turn": 1},
        {"chat_id": 11, "parent_chat_id": 10, "timestamp": 2.0, "turn": 2},
    ]
    trace = tmp_path / "order.jsonl"
    common = {"input_length": 16, "output_length": 1, "type": "text", "hash_ids": [1]}
    trace.write_text("".join(json.dumps({**line, **common}) + "\n" for line in lines))
    rows = _rows(warehouse, trace)
    assert [(row[5], row[6], row[8], row[9]) for row in rows] == [
        ("10", 1, None, "10"),
        ("10", 2, "10", "11"),
        ("10", 3, "11", "12"),
    ]


def test_bad_bailian_lines_are_quarantined_with_one_sentence(cli, tmp_path):
    good = {"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.0, "input_length": 16}
    trace = tmp_path / "bailian_bad.jsonl"
    trace.write_text(
        json.dumps({**good, "output_length": 2, "type": "text", "turn": 1, "hash_ids": [7]})
        + "\n"
        + json.dumps({**good, "chat_id": 2, "input_length": -5, "output_length": 1})
        + "\n"
        + '{"chat_id": 3, "parent_chat_id": -1, "timestamp": 1.0,\n'
        + json.dumps({"chat_id": 4, "parent_chat_id": 1, "input_length": 3, "output_length": 1})
        + "\n"
    )
    wh = warehouse_at(tmp_path / "wh")
    status, out, err = cli("-w", wh, "ingest", str(trace))
    assert status == 0, err
    assert "1 rows into run bailian_bad" in out and "3 line(s) rejected" in out
    status, out, _ = cli(
        "-w", wh, "sql", "SELECT line_no, reason FROM quarantine ORDER BY line_no", "-f", "csv"
    )
    reasons = dict(line.split(",", 1) for line in out.splitlines()[1:])
    assert reasons["2"] == "input_tokens is negative"
    assert reasons["3"].startswith("invalid JSON")
    assert reasons["4"] == "missing field timestamp"


# -- Dynamo: local hash scopes --------------------------------------------------------------


def test_agentic_mooncake_rows_by_hand(warehouse):
    # block_size and scope from the header; not_before_ms / 1000; the scope of a local id is
    # the source digest and the play: p1's 1, 2 are one pair of blocks, p2's another
    p1 = [_global(i, "kvtrace-example-v1/p1") for i in range(6)]
    p2 = [_global(i, "kvtrace-example-v1/p2") for i in range(3)]
    assert _rows(warehouse, AGENTIC) == [
        (0.0, 128, 16, p1[1:3], 64, "p1:root", 1, None, None, "p1:request:0"),
        (1.5, 192, 8, p1[1:4], 64, "p1:explore", 1, None, "p1:request:0", "p1:request:1"),
        (2.0, 100, 10, p2[1:3], 64, "p2:root", 1, None, None, "p2:request:0"),
        (4.0, 256, 32, [*p1[1:3], *p1[4:6]], 64, "p1:root", 2, None, "p1:request:0",
         "p1:request:2"),
    ]  # fmt: skip


def test_weka_rows_by_hand_with_the_sub_agent_nested(warehouse):
    # aiperf's weka_subagent.json: a main request, an Explore sub-agent of two requests
    # (spawned by the main request before it), the main session's second request
    ids = {i: _global(i, _weka_scope(WEKA_SUBAGENT)) for i in (1, 2, 3, 4, 10, 11, 12)}
    main, sub = "trace_sub_n2s1", "trace_sub_n2s1/subagent:1:agent_001"
    assert _rows(warehouse, WEKA_SUBAGENT) == [
        (0.0, 180, 25, [ids[1], ids[2]], 64, main, 1, None, None, f"{main}/outer:0"),
        (1.2, 200, 30, [ids[10], ids[11]], 64, sub, 1, "Explore", f"{main}/outer:0",
         f"{main}/outer:1:inner:0"),
        (2.4, 260, 40, [ids[10], ids[11], ids[12]], 64, sub, 2, "Explore",
         f"{main}/outer:1:inner:0", f"{main}/outer:1:inner:1"),
        (6.0, 280, 45, [ids[i] for i in (1, 2, 3, 4)], 64, main, 2, None, f"{main}/outer:0",
         f"{main}/outer:2"),
    ]  # fmt: skip


def test_local_hashes_share_blocks_within_a_file_and_not_across(warehouse):
    # both aiperf files open with hash_ids [1, 2] and end with [1, 2, 3, 4] (block 64)
    ingest(warehouse, [str(WEKA_SUBAGENT), str(WEKA_ANCHOR)])
    con = connect(warehouse)
    by_run = dict(
        con.sql(
            "SELECT run_id, list(hash_ids ORDER BY arrival_s) FROM workload_requests "
            "GROUP BY run_id"
        ).fetchall()
    )
    first, second = (by_run[run] for run in sorted(by_run))
    for requests in (first, second):
        assert requests[-1][:2] == requests[0]  # within a file: the same two blocks
    blocks = [{block for request in run for block in request} for run in (first, second)]
    assert not blocks[0] & blocks[1]  # across files: none shared
    # a run at a time: weka_start_anchor reads 2 + 2 + 3 + 4 = 11 blocks, the last
    # request's first two seen before; weka_subagent 2 + 2 + 3 + 4 = 11, its second
    # sub-agent request 2 and its last request 2
    reuse = con.sql(
        "SELECT run_id, blocks, seen_blocks, hit_requests FROM workload_prefix_reuse"
    ).fetchall()
    assert [row[1:] for row in reuse] == [(11, 2, 1), (11, 4, 2)]


def test_the_hit_curve_on_two_plays_that_share_local_ids(warehouse):
    # arrival order A = p1 [1, 2], B = p1 [1, 2, 3], C = p2 [1, 2], D = p1 [1, 2, 4, 5]:
    # 11 blocks.  A vLLM-like pool of prefixes (semantics 'prefix', LRU), 3 blocks: B hits
    # 2 (A's run), C's two new blocks evict p1's 1 and 1-2, so D hits 0: 2 / 11.  Of 5
    # blocks: D finds p1's 1, 1-2: 4 / 11.  Were the ids one scope, C would hit 2 more.
    ingest(warehouse, [str(AGENTIC)])
    curve = (
        connect(warehouse)
        .sql(
            "SELECT capacity_blocks, accesses, hits FROM workload_prefix_hit_curve("
            "'lru', [3, 5], 'prefix') WHERE capacity_blocks IN (3, 5) ORDER BY capacity_blocks"
        )
        .fetchall()
    )
    assert curve == [(3, 11, 2), (5, 11, 4)]


# -- mooncake-delta -------------------------------------------------------------------------


def test_delta_turns_expand_to_the_session_so_far(warehouse):
    # s0: r0 1000 in / 200 out, blocks [1, 2]; r1 adds 300 and [3]: 1000 + 200 + 300 = 1500
    # tokens, [1, 2, 3]; r2 adds 600 and [4, 5] after delay 2500 ms from r1's arrival:
    # 1500 + 100 + 600 = 2200 at 3.0 + 2.5 s.  s1 is its own session.  Blocks of 512.
    assert _rows(warehouse, DELTA, trace_format="mooncake-delta") == [
        (0.0, 1000, 200, [1, 2], 512, "s0", 1, None, None, "r0"),
        (0.5, 512, 50, [1], 512, "s1", 1, None, None, "q0"),
        (3.0, 1500, 100, [1, 2, 3], 512, "s0", 2, None, "r0", "r1"),
        (5.5, 2200, 10, [1, 2, 3, 4, 5], 512, "s0", 3, None, "r1", "r2"),
    ]


def test_without_being_asked_a_delta_file_reads_as_mooncake(warehouse):
    rows = _rows(warehouse, DELTA)
    # Mooncake's rule: each row as it stands, timestamps in ms, no turn or parent; the
    # row with only a delay has no arrival and goes to the quarantine
    assert [(row[0], row[1], row[3], row[6]) for row in rows] == [
        (0.0, 1000, [1, 2], None),
        (0.5, 512, [1], None),
        (3.0, 300, [3], None),
    ]


def test_a_bad_delta_turn_takes_its_sessions_later_turns_along(cli, tmp_path):
    lengths = {"input_length": 10, "output_length": 1}
    rows = [
        {"session_id": "a", "timestamp": 0, **lengths, "hash_ids": [1]},
        {"session_id": "a", "timestamp": 5, **lengths, "hash_ids": "x"},
        {"session_id": "b", "timestamp": 6, **lengths, "hash_ids": [9]},
        {"session_id": "a", "timestamp": 7, **lengths, "hash_ids": [2]},
    ]
    trace = tmp_path / "delta_bad.jsonl"
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    wh = warehouse_at(tmp_path / "wh")
    status, out, err = cli("-w", wh, "ingest", "--trace-format", "mooncake-delta", str(trace))
    assert status == 0, err
    assert "2 rows into run delta_bad" in out and "2 line(s) rejected" in out
    status, out, _ = cli(
        "-w", wh, "sql", "SELECT line_no, reason FROM quarantine ORDER BY line_no", "-f", "csv"
    )
    assert out.splitlines()[1:] == [
        "2,hash_ids is missing or not a list of integers",
        '4,"an earlier turn of its session was quarantined, so its prompt cannot be rebuilt"',
    ]


def test_an_unknown_trace_format_is_a_usage_error(cli, tmp_path):
    status, _, err = cli(
        "-w", warehouse_at(tmp_path / "wh"), "ingest", "--trace-format", "delta", str(DELTA)
    )
    assert status == 2 and "'delta' is not one of mooncake-delta" in err


# -- bad Dynamo input ------------------------------------------------------------------------


def test_a_bad_weka_trace_or_request_is_quarantined_and_the_rest_kept(cli, tmp_path):
    good = {"id": "g", "block_size": 4, "hash_id_scope": "local"}
    request = {"t": 1.0, "type": "n", "model": "m", "in": 8, "out": 2, "hash_ids": [1, 2]}
    traces = [
        {**good, "requests": [request, {**request, "type": "tool"}]},
        {"id": "no-size", "hash_id_scope": "local", "block_size": 0, "requests": [request]},
        {**good, "id": "h", "requests": [{**request, "t": 2.0}]},
    ]
    trace = tmp_path / "weka_lines.jsonl"
    trace.write_text("".join(json.dumps(line) + "\n" for line in traces))
    wh = warehouse_at(tmp_path / "wh")
    status, out, err = cli("-w", wh, "ingest", str(trace))
    assert status == 0, err
    assert "2 rows into run weka_lines" in out and "2 line(s) rejected" in out
    status, out, _ = cli(
        "-w", wh, "sql", "SELECT line_no, reason FROM quarantine ORDER BY line_no", "-f", "csv"
    )
    assert out.splitlines()[1:] == [
        '1,"a Weka request\'s type must be n, s or subagent"',
        '2,"a Weka trace needs a positive block_size, a hash_id_scope of local or global '
        'and a list of requests"',
    ]
    # the two kept requests: trace g's first and trace h's, each its own scope of id 1
    hashes = connect(wh).sql("SELECT hash_ids[1] FROM workload_requests").fetchall()
    assert len({row[0] for row in hashes}) == 2


def test_a_global_scope_keeps_the_ids(warehouse, tmp_path):
    trace = tmp_path / "weka_global.jsonl"
    request = {"t": 0.5, "type": "s", "model": "m", "in": 8, "out": 2, "hash_ids": [5, 6]}
    trace.write_text(
        json.dumps({"id": "g", "block_size": 4, "hash_id_scope": "global", "requests": [request]})
        + "\n"
    )
    # (arrival_s counts from the trace's earliest arrival, t = 0.5 here)
    assert _rows(warehouse, trace) == [(0.0, 8, 2, [5, 6], 4, "g", 1, None, None, "g/outer:0")]


def test_the_run_records_a_format_read_because_asked(warehouse):
    ingest(warehouse, [str(DELTA)], trace_format="mooncake-delta")
    (config,) = connect(warehouse).sql("SELECT collector_config FROM runs").fetchall()[0]
    assert json.loads(config)["trace_format"] == "mooncake-delta"


def test_an_agentic_file_of_another_version_exits_with_one_sentence(cli, tmp_path):
    trace = tmp_path / "agentic_v3.jsonl"
    header = json.loads(AGENTIC.read_text().splitlines()[0])
    trace.write_text(json.dumps({**header, "version": 3}) + "\n")
    status, _, err = cli("-w", warehouse_at(tmp_path / "wh"), "ingest", str(trace))
    assert status != 0
    assert "is dynamo.agentic_mooncake version 3; kvtrace reads version 2" in err
    assert "Traceback" not in err


def test_formats_without_sessions_keep_the_new_columns_null(warehouse):
    rows = _rows(warehouse, DATA / "mooncake_conversation_trace.jsonl")
    assert len(rows) == 12_031
    assert {row[6:] for row in rows} == {(None, None, None, None)}
