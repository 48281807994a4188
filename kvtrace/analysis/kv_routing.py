"""Routing scored on engine KV events: each request's actual worker against the one that
held the longest prefix of it when it arrived.

A request is a stored event (one per engine batch position, as `kv_events_as_workload`
numbers them, in the same order): the worker that stored the blocks served it, and its
prompt is the prefix chain up to the event's last block (its ancestors by
``parent_hash``, from every stored event of the run).  The workers' caches are replayed
from the events in that order: ``stored`` adds a worker's blocks, ``removed`` drops them,
``cleared`` and ``restart`` empty its pool.  When a request arrives (before its own
blocks are stored), each worker's overlap is the leading run of the chain it holds; a
prefix-aware router would have sent it to a worker of the largest overlap.

Limits: a request that found every block cached stores none and is not seen; the chain
stops at a parent no stored event of the run names (stored before the recording began);
a block's hash names its whole prefix, so chains from several workers agree; the router
compared against knows every worker's cache exactly and no load.
"""

from __future__ import annotations

from typing import Any

import duckdb

__all__ = ["kv_routing_rows"]

_EVENTS = """
SELECT worker, epoch, seq, position, block_idx, ts, kind, block_hash, parent_hash
FROM kv_events
WHERE run_id = $run AND kind IN ('stored', 'removed', 'cleared', 'restart')
ORDER BY ts, worker, epoch, seq, position, block_idx
"""


def _chain(last: str, parent_of: dict[str, str | None]) -> list[str]:
    """The blocks from the root of ``last``'s prefix down to it."""
    chain, seen = [last], {last}
    parent = parent_of.get(last)
    while parent is not None and parent in parent_of and parent not in seen:
        chain.append(parent)
        seen.add(parent)
        parent = parent_of[parent]
    chain.reverse()
    return chain


def _overlap(chain: list[str], held: set[str]) -> int:
    run = 0
    while run < len(chain) and chain[run] in held:
        run += 1
    return run


def kv_routing_rows(con: duckdb.DuckDBPyConnection, run_id: str | None) -> list[dict[str, Any]]:
    """The rows of ``kv_routing_score``: per request of ``run_id`` (None: of every run
    with stored events), its worker's overlap beside the largest any worker had."""
    runs = [
        row[0]
        for row in con.sql(
            "SELECT DISTINCT run_id FROM kv_events WHERE kind = 'stored' "
            "AND ($run IS NULL OR run_id = $run) ORDER BY run_id",
            params={"run": run_id},
        ).fetchall()
    ]
    rows = []
    for run in runs:
        events = con.sql(_EVENTS, params={"run": run}).fetchall()
        parent_of: dict[str, str | None] = {}
        for *_, kind, block, parent in events:
            if kind == "stored" and block not in parent_of:
                parent_of[block] = parent
        workers = sorted({event[0] for event in events})
        held: dict[str, set[str]] = {worker: set() for worker in workers}
        first_ts = min(event[5] for event in events)
        index = 0
        at = 0
        while at < len(events):
            worker, epoch, seq, position, _, ts, kind, block, _ = events[at]
            if kind != "stored":
                if kind == "removed":
                    held[worker].discard(block)
                else:
                    held[worker].clear()
                at += 1
                continue
            group = [block]  # the event's blocks: the rows sharing its batch position
            at += 1
            while at < len(events) and events[at][:4] == (worker, epoch, seq, position):
                group.append(events[at][7])
                at += 1
            chain = _chain(group[-1], parent_of)
            overlaps = {w: _overlap(chain, held[w]) for w in workers}
            best = max(overlaps.values())
            best_worker = worker if overlaps[worker] == best else None
            if best_worker is None:
                best_worker = next(w for w in workers if overlaps[w] == best)
            rows.append(
                {
                    "run_id": run,
                    "request_idx": index,
                    "t_s": ts - first_ts,
                    "worker": worker,
                    "blocks": len(chain),
                    "hit_blocks": overlaps[worker],
                    "best_worker": best_worker,
                    "best_hit_blocks": best,
                    "agrees": overlaps[worker] == best,
                    "workers_seen": len(workers),
                }
            )
            held[worker].update(group)
            index += 1
    return rows
