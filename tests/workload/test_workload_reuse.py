"""The reuse views of workload_reuse.sql: the header's worked example by hand, traces
without types, turns or sessions, a brute force in plain Python (a walk over the
requests in arrival order with dicts) on generated traces with ties in arrival time, and
Mooncake's conversation trace."""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np
import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse
from tests.conftest import DATA

BLOCK = 16  # tokens per block of the hand-made traces (Bailian's block size)


def store(warehouse: Warehouse, run: str, rows: list[dict]) -> None:
    """Write ``rows`` as the requests of ``run`` through the warehouse's writer."""
    with warehouse.transaction(run, operation="collect") as commit:
        warehouse.write_rows(
            commit,
            "workload_requests",
            [{"run_id": run, "hash_block_tokens": BLOCK, "output_tokens": 1, **r} for r in rows],
        )


def request(idx: int, at: float, ids: list[int], **extra) -> dict:
    return {
        "request_idx": idx,
        "arrival_s": at,
        "hash_ids": ids,
        "input_tokens": len(ids) * BLOCK,
        **extra,
    }


# The header's worked example: session s reads [1, 2] at 0 s and [1, 2, 3] at 5 s; the
# single-turn request t reads [1, 4] at 5 s, after s's second turn (request_idx 2 > 1).
HEADER_EXAMPLE = [
    request(0, 0.0, [1, 2], session_id="s", turn=1, request_type="text", request_key="a"),
    request(1, 5.0, [1, 2, 3], session_id="s", turn=2, request_type="text", parent_id="a"),
    request(2, 5.0, [1, 4], session_id="t", turn=1, request_type="image"),
]


def rows(con, sql: str) -> list[tuple]:
    return con.execute(sql).fetchall()


def test_the_header_example(warehouse):
    store(warehouse, "r", HEADER_EXAMPLE)
    con = connect(warehouse)
    # s's second turn reads 1 and 2 five seconds after s's first; t reads 1 at the same
    # time as s's second turn, its previous read (0 s), from another session
    assert rows(
        con,
        "SELECT request_idx, position, hash_id, turn, turn_kind, previous_request_idx, "
        "reuse_time_s, same_session FROM workload_reuses",
    ) == [
        (1, 1, 1, 2, "follow_up", 0, 5.0, True),
        (1, 2, 2, 2, "follow_up", 0, 5.0, True),
        (2, 1, 1, 1, "single_turn", 1, 0.0, False),
    ]
    assert rows(
        con, "SELECT request_type, turn, reuses, mean_s, p50_s, p99_s FROM workload_reuse_time"
    ) == [
        ("image", 1, 1, 0.0, 0.0, 0.0),
        ("text", 2, 2, 5.0, 5.0, 5.0),
    ]
    # blocks 1, 2, 3, 4 reused 2, 1, 0, 0 times: the top block (1 to 25 % of 4) takes
    # 2 of 3, two blocks (26 % to 50 %) all 3
    lorenz = rows(con, "SELECT block_share, top_blocks, reuse_share FROM workload_reuse_lorenz")
    assert len(lorenz) == 100
    assert lorenz[0] == (0.01, 1, pytest.approx(2 / 3))
    assert lorenz[24] == (0.25, 1, pytest.approx(2 / 3))
    assert lorenz[25] == (0.26, 2, 1.0)
    assert lorenz[99] == (1.0, 4, 1.0)
    # Gini: mean absolute difference of (2, 1, 0, 0) over twice the mean:
    # (|2-1| + 2|2-0| + 2|1-0|) x 2 / 16 pairs = 14 / 16 = 0.875; / (2 x 0.75) = 0.583
    assert rows(con, "SELECT * EXCLUDE (run_id) FROM workload_reuse_skew") == [
        (4, 2, 3, pytest.approx(2 / 3), pytest.approx(2 / 3), 0.5, pytest.approx(7 / 12))
    ]
    assert rows(con, "SELECT * EXCLUDE (run_id) FROM workload_reuse_kinds") == [
        ("image", 1, 1, 0, 0, 1.0, 0.0, 0, 1, 1.0),
        ("text", 2, 0, 0, 2, 0.0, 1.0, 2, 0, 0.0),
    ]
    # text: 5 blocks, 2 seen (s's second turn: its leading 2, 32 of 80 tokens); image:
    # 1 of 2 (16 of 32 tokens)
    assert rows(con, "SELECT * EXCLUDE (run_id) FROM workload_hit_rate_by_type") == [
        ("image", 1, 2, 1, 0.5, 1, 16, 32, 0.5),
        ("text", 2, 5, 2, 0.4, 2, 32, 80, 0.4),
    ]


def test_traces_without_types_turns_or_sessions(warehouse):
    # run "bare": no type, turn or session (Mooncake's format); run "sessions": sessions
    # only, so a turn is the request's place in its session; a request without hashes
    # (an Azure-like row) is in neither
    store(
        warehouse,
        "bare",
        [request(0, 0.0, [7, 8]), request(1, 2.0, [7, 9]), request(2, 2.0, [7, 8])],
    )
    store(
        warehouse,
        "sessions",
        [
            request(0, 0.0, [1], session_id="u"),
            request(1, 1.0, [1, 2], session_id="u"),
            request(2, 3.0, [1, 5], session_id="v"),
            {"request_idx": 3, "arrival_s": 4.0, "input_tokens": 10, "hash_ids": None},
        ],
    )
    con = connect(warehouse)
    assert rows(
        con,
        "SELECT run_id, request_idx, hash_id, request_type, turn, turn_kind, reuse_time_s, "
        "same_session FROM workload_reuses ORDER BY ALL",
    ) == [
        ("bare", 1, 7, None, None, None, 2.0, None),
        ("bare", 2, 7, None, None, None, 0.0, None),  # request 1 read 7 last, at 2 s
        ("bare", 2, 8, None, None, None, 2.0, None),
        ("sessions", 1, 1, None, 2, "follow_up", 1.0, True),
        ("sessions", 2, 1, None, 1, "single_turn", 2.0, False),
    ]
    # NULL types and turns are groups of their own; shares of unknown kinds are NULL
    assert rows(con, "SELECT * EXCLUDE (run_id) FROM workload_reuse_kinds ORDER BY run_id") == [
        (None, 3, 0, 0, 0, None, None, 0, 0, None),
        (None, 2, 1, 0, 1, 0.5, 0.5, 1, 1, 0.5),
    ]
    assert rows(
        con, "SELECT run_id, turn, reuses, mean_s FROM workload_reuse_time ORDER BY ALL"
    ) == [("bare", None, 3, pytest.approx(4 / 3)), ("sessions", 1, 1, 2.0), ("sessions", 2, 1, 1.0)]
    assert rows(con, "SELECT run_id, requests FROM workload_hit_rate_by_type ORDER BY 1") == [
        ("bare", 3),
        ("sessions", 3),
    ]


def test_a_bailian_trace_by_hand(warehouse):
    """tests/data/workload/bailian_documented.jsonl, in arrival order (chat: time, type,
    turn, session by parent chain, hash ids):
    0: 0 s text 1 (s0) [0 1 2]; 1: 0.5 s search 1 (s1) [3 4]; 2: 3.25 s text 2 (s0)
    [0 1 5 6 7]; 3: 9 s text 3 (s0) [0 1 5 6 8 9 10]; 4: 9.5 s image 1 (s4) [11];
    5: 10 s file 4 (parent 77, not in the file) [12 13 14]; 6: 12.5 s search 2 (s1)
    [3 4 15 16].  Every reuse is a follow-up's, of its own session's earlier turn."""
    ingest(warehouse, [str(DATA / "workload" / "bailian_documented.jsonl")])
    con = connect(warehouse)
    assert rows(
        con,
        "SELECT request_idx, hash_id, previous_request_idx, reuse_time_s, turn_kind, "
        "same_session FROM workload_reuses",
    ) == [
        (2, 0, 0, 3.25, "follow_up", True),
        (2, 1, 0, 3.25, "follow_up", True),
        (3, 0, 2, 5.75, "follow_up", True),  # chat 2 read 0, 1, 5, 6 last
        (3, 1, 2, 5.75, "follow_up", True),
        (3, 5, 2, 5.75, "follow_up", True),
        (3, 6, 2, 5.75, "follow_up", True),
        (6, 3, 1, 12.0, "follow_up", True),
        (6, 4, 1, 12.0, "follow_up", True),
    ]
    assert rows(con, "SELECT request_type, turn, reuses, mean_s FROM workload_reuse_time") == [
        ("search", 2, 2, 12.0),
        ("text", 2, 2, 3.25),
        ("text", 3, 4, 5.75),
    ]
    # 17 blocks reused 2, 2, 1, 1, 1, 1 and 11 x 0 times (8 reuses): the top 1 % is 1
    # block (2/8), the top 10 % 2 blocks (4/8); 80 % (6.4 reuses) needs 5 of 17 blocks;
    # Gini (16 x 2 + 14 x 2 + 12 + 10 + 8 + 6) / (17 x 8) = 96 / 136
    assert rows(con, "SELECT * EXCLUDE (run_id) FROM workload_reuse_skew") == [
        (17, 6, 8, 0.25, 0.5, pytest.approx(5 / 17), pytest.approx(96 / 136))
    ]
    assert rows(con, "SELECT * EXCLUDE (run_id) FROM workload_reuse_kinds") == [
        ("search", 2, 0, 0, 2, 0.0, 1.0, 2, 0, 0.0),
        ("text", 6, 0, 0, 6, 0.0, 1.0, 6, 0, 0.0),
    ]
    # text: 15 blocks, 6 seen and leading (chat 2: 2, chat 3: 4), 32 + 64 of
    # min(48, 40) + min(80, 70) + min(112, 100) = 210 hashed tokens; search: 2 of 6
    # blocks, 32 of 20 + 50 tokens; image and file: none
    assert rows(con, "SELECT * EXCLUDE (run_id) FROM workload_hit_rate_by_type") == [
        ("file", 1, 3, 0, 0.0, 0, 0, 33, 0.0),
        ("image", 1, 1, 0, 0.0, 0, 0, 16, 0.0),
        ("search", 2, 6, 2, pytest.approx(1 / 3), 2, 32, 70, pytest.approx(32 / 70)),
        ("text", 3, 15, 6, 0.4, 6, 96, 210, pytest.approx(96 / 210)),
    ]


# -- brute force ---------------------------------------------------------------------------


@dataclass
class Request:
    idx: int
    at: float
    ids: list[int]
    tokens: int
    session: str | None
    turn: int | None
    kind: str | None  # request type
    parent: int | None  # the request (idx) of the session's previous turn


def generate(seed: int, sessions: int = 70) -> list[Request]:
    """A trace of conversations: each opens with one of a few shared system prompts, and
    each turn extends its previous turn's prompt (block ids chained: one id per prefix),
    now and then with a block of any earlier prompt repeated (an id that does not
    chain, some twice in one prompt).  Arrivals are whole seconds (ties are common) and
    the file lists requests in an order of their own."""
    rng = random.Random(seed)
    ids: dict[tuple, int] = {}
    prompts = [tuple(rng.randrange(1000) for _ in range(rng.randint(1, 3))) for _ in range(4)]
    made = []
    for s in range(sessions):
        path = list(rng.choice(prompts))
        at = rng.randint(0, 150)
        kind = rng.choice(["text", "image", "file", None])
        for turn in range(1, rng.choice([1, 1, 2, 3, 5]) + 1):
            path += [rng.randrange(1000) for _ in range(rng.randint(1, 3))]
            hashes = [ids.setdefault(tuple(path[: i + 1]), len(ids)) for i in range(len(path))]
            if ids and rng.random() < 0.2:
                hashes += rng.choices(range(len(ids)), k=rng.randint(1, 2))
            made.append((at, hashes, f"s{s}", turn, kind))
            at += rng.choice([0, 0, 1, 4, 20])
    order = list(range(len(made)))
    rng.shuffle(order)
    return [
        Request(
            idx=idx,
            at=float(at),
            ids=hashes,
            tokens=len(hashes) * BLOCK - rng.randrange(BLOCK),
            session=session,
            turn=turn,
            kind=kind,
            parent=order[made_at - 1] if turn > 1 else None,  # turns are made in order
        )
        for made_at, (idx, (at, hashes, session, turn, kind)) in enumerate(
            zip(order, made, strict=True)
        )
    ]


def as_bailian(trace: list[Request]) -> str:
    """The trace in Bailian's JSONL (chat_id, parent_chat_id -1 for a root, timestamp in
    seconds, type, turn, hash_ids), a line per request in request_idx order."""
    return "".join(
        json.dumps(
            {
                "chat_id": r.idx,
                "parent_chat_id": -1 if r.parent is None else r.parent,
                "timestamp": r.at,
                "input_length": r.tokens,
                "output_length": 1,
                "type": r.kind,
                "turn": r.turn,
                "hash_ids": r.ids,
            }
        )
        + "\n"
        for r in sorted(trace, key=lambda r: r.idx)
    )


def as_rows(trace: list[Request], recorded: str) -> list[dict]:
    """Rows as a trace records them: ``all`` (Bailian: type, turn, parent, session),
    ``sessions`` (a session only) or ``none``."""
    out = []
    for r in trace:
        row = {"request_idx": r.idx, "arrival_s": r.at, "hash_ids": r.ids, "input_tokens": r.tokens}
        if recorded != "none":
            row["session_id"] = r.session
        if recorded == "all":
            parent = None if r.parent is None else str(r.parent)
            row |= {"turn": r.turn, "request_type": r.kind, "parent_id": parent}
        out.append(row)
    return out


def brute_force(trace: list[Request], recorded: str) -> dict[str, object]:
    """Every view's rows for one run, from a walk over its requests in arrival order
    (``recorded`` as in `as_rows`; a Bailian file records what ``all`` does)."""
    order = sorted(trace, key=lambda r: (r.at, r.idx))
    session_of = {r.idx: r.session if recorded != "none" else None for r in trace}
    kind_of = {r.idx: r.kind if recorded == "all" else None for r in trace}
    size = Counter(session_of[r.idx] for r in trace)
    place: Counter[str | None] = Counter()
    last: dict[int, Request] = {}  # block -> the latest request that read it
    seen: set[int] = set()
    reuses_of: Counter[int] = Counter()
    reuses, by_type = [], defaultdict(lambda: [0] * 6)
    for r in order:
        session, kind = session_of[r.idx], kind_of[r.idx]
        place[session] += 1
        turn = r.turn if recorded == "all" else (place[session] if session else None)
        parent = r.parent if recorded == "all" else None
        if turn is None:
            turn_kind = None
        elif turn > 1 or parent is not None:
            turn_kind = "follow_up"
        elif session is not None and size[session] > 1:
            turn_kind = "first_turn"
        else:
            turn_kind = "single_turn"
        for position, h in enumerate(r.ids, 1):
            if h in last:
                before = last[h]
                other = session_of[before.idx]
                reuses.append(
                    (
                        r.idx,
                        position,
                        h,
                        kind,
                        turn,
                        turn_kind,
                        before.idx,
                        r.at - before.at,
                        None if session is None or other is None else session == other,
                    )
                )
                reuses_of[h] += 1
        leading = next((i for i, h in enumerate(r.ids) if h not in seen), len(r.ids))
        counts = by_type[kind]
        for i, value in enumerate(
            (
                1,
                len(r.ids),
                sum(h in seen for h in r.ids),
                leading,
                min(leading * BLOCK, r.tokens),
                min(len(r.ids) * BLOCK, r.tokens),
            )
        ):
            counts[i] += value
        for h in r.ids:
            last[h] = r
            seen.add(h)
            reuses_of.setdefault(h, 0)
    return {"reuses": reuses, "by_type": by_type, "per_block": list(reuses_of.values())}


def by_key(items, key):
    groups = defaultdict(list)
    for item in items:
        groups[key(item)].append(item)
    return groups


def sort_key(group: tuple) -> tuple:
    return tuple((value is None, value) for value in group)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_view_equals_a_walk_over_a_generated_trace(warehouse, tmp_path, seed):
    trace = generate(seed)
    assert len(trace) > 150
    assert len({r.at for r in trace}) < len(trace)  # ties in arrival time
    runs = {"all": "all", "sessions": "sessions", "none": "none"}  # run -> what it records
    for recorded in runs:
        store(warehouse, recorded, as_rows(trace, recorded))
    bailian = tmp_path / "bailian.jsonl"  # the same trace through the Bailian reader
    bailian.write_text(as_bailian(trace))
    (report,) = ingest(warehouse, [str(bailian)]).files
    assert (report.fmt, report.rows, report.rejected) == ("bailian", len(trace), 0)
    con = connect(warehouse)
    (bailian_run,) = con.execute("SELECT run_id FROM runs WHERE run_name = 'bailian'").fetchone()
    runs[bailian_run] = "all"
    for run_id, recorded in runs.items():
        expected = brute_force(trace, recorded)
        run = f"run_id = '{run_id}'"

        reuses = expected["reuses"]
        assert rows(
            con,
            "SELECT request_idx, position, hash_id, request_type, turn, turn_kind, "
            f"previous_request_idx, reuse_time_s, same_session FROM workload_reuses WHERE {run} "
            "ORDER BY request_idx, position",
        ) == sorted(reuses, key=lambda x: (x[0], x[1]))

        groups = by_key(reuses, lambda x: (x[3], x[4]))
        times = rows(
            con,
            f"SELECT request_type, turn, reuses, mean_s, p50_s, p90_s, p99_s "
            f"FROM workload_reuse_time WHERE {run}",
        )
        assert [t[:2] for t in times] == sorted(groups, key=sort_key)
        for kind, turn, count, *stats in times:
            waits = np.array([x[7] for x in groups[kind, turn]])
            assert count == len(waits)
            assert stats == pytest.approx(
                [waits.mean(), *np.percentile(waits, [50, 90, 99])], abs=1e-9
            )

        kinds = rows(con, f"SELECT * EXCLUDE (run_id) FROM workload_reuse_kinds WHERE {run}")
        per_type = by_key(reuses, lambda x: x[3])
        assert [k[0] for k in kinds] == sorted(per_type, key=lambda k: (k is None, k))
        for kind, *counts in kinds:
            group = per_type[kind]
            single = sum(x[5] == "single_turn" for x in group)
            first = sum(x[5] == "first_turn" for x in group)
            follow = sum(x[5] == "follow_up" for x in group)
            inside = sum(x[8] is True for x in group)
            cross = sum(x[8] is False for x in group)
            known = single + first + follow
            assert counts == [
                len(group),
                single,
                first,
                follow,
                single / known if known else None,
                (first + follow) / known if known else None,
                inside,
                cross,
                cross / (inside + cross) if inside + cross else None,
            ]

        per_block = sorted(expected["per_block"], reverse=True)
        n, total = len(per_block), sum(per_block)
        cumulative = np.cumsum(per_block)
        top = [-(-percent * n // 100) for percent in range(1, 101)]  # ceil, whole blocks
        assert rows(
            con, f"SELECT top_blocks, reuse_share FROM workload_reuse_lorenz WHERE {run}"
        ) == [(k, pytest.approx(cumulative[k - 1] / total)) for k in top]
        values = np.array(per_block, dtype=float)
        gini = np.abs(values[:, None] - values[None, :]).sum() / (2 * n * n * values.mean())
        assert rows(con, f"SELECT * EXCLUDE (run_id) FROM workload_reuse_skew WHERE {run}") == [
            (
                n,
                sum(v > 0 for v in per_block),
                total,
                pytest.approx(cumulative[top[0] - 1] / total),
                pytest.approx(cumulative[top[9] - 1] / total),
                pytest.approx((int(np.argmax(cumulative >= 0.8 * total)) + 1) / n),
                pytest.approx(gini),
            )
        ]

        hit = rows(con, f"SELECT * EXCLUDE (run_id) FROM workload_hit_rate_by_type WHERE {run}")
        by_type = expected["by_type"]
        assert [h[0] for h in hit] == sorted(by_type, key=lambda k: (k is None, k))
        for kind, *values in hit:
            requests, blocks, seen, leading, hit_tokens, hashed = by_type[kind]
            assert values == [
                requests,
                blocks,
                seen,
                pytest.approx(seen / blocks),
                leading,
                hit_tokens,
                hashed,
                pytest.approx(hit_tokens / hashed),
            ]


def test_mooncakes_conversation_trace(warehouse):
    """On a real trace (hash ids chained): the types' rates sum to workload_prefix_reuse's
    and workload_prefix_tree's, and the skew equals a count of every block's reuses."""
    ingest(warehouse, [str(DATA / "mooncake_conversation_trace.jsonl")])
    con = connect(warehouse)
    ((requests, blocks, seen, block_rate, prefix_rate),) = rows(
        con,
        "SELECT requests, blocks, seen_blocks, block_hit_rate, prefix_hit_rate "
        "FROM workload_hit_rate_by_type",
    )
    reuse = rows(
        con, "SELECT requests, blocks, seen_blocks, reuse_share FROM workload_prefix_reuse"
    )
    assert reuse == [(requests, blocks, seen, pytest.approx(block_rate))]
    assert rows(con, "SELECT infinite_hit_rate FROM workload_prefix_tree") == [
        (pytest.approx(prefix_rate),)
    ]

    reads: Counter[int] = Counter()
    for line in (DATA / "mooncake_conversation_trace.jsonl").read_text().splitlines():
        reads.update(json.loads(line)["hash_ids"])  # no id twice in one of its prompts
    per_block = sorted((count - 1 for count in reads.values()), reverse=True)
    top_tenth = sum(per_block[: -(-len(per_block) // 10)]) / sum(per_block)
    assert rows(con, "SELECT blocks, reuses, top_10pct_share FROM workload_reuse_skew") == [
        (len(per_block), seen, pytest.approx(top_tenth))
    ]
    assert round(top_tenth, 2) == 0.75  # the ATC'25 study: 77 % on Bailian's traces
