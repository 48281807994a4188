"""One rank's profiler events as arrays, with the links HTA's call-graph analyses use.

`RankEvents` holds a run's events of one rank in trace order.  `cpu_gpu_links` pairs
each CUDA runtime call with the GPU event it caused (the same correlation id);
`call_stacks` nests the CPU events of each thread, as HTA 0.5's call stacks do: at one
instant ends come before starts, a longer event opens before a shorter one, and a kernel
hangs under the runtime call that launched it.  The frequent kernel sequences and the
critical path (`timeline_kernel_sequences`, `timeline_critical_path`) build on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb
import numpy as np

from kvtrace.sql.catalog import quote_literal

NONE = -1  # no stream (a CPU event), no correlation, no linked event
DEVICE_SYNCS = ("Event Sync", "Context Sync")  # waits on the GPU a trace puts on no stream

_COLUMNS = (
    "event_idx, pid, tid, coalesce(stream, -1) AS stream, category, name, ts_us, dur_us, "
    "coalesce(correlation, -1) AS correlation, coalesce(wait_on_stream, -1) AS wait_on_stream, "
    "coalesce(wait_on_correlation, -1) AS wait_on_correlation"
)


@dataclass
class RankEvents:
    """The events of one run and rank, in trace order; times in whole microseconds."""

    run_id: str
    rank: int
    index: np.ndarray  # event_idx
    thread: np.ndarray  # (pid, tid) as one label per event
    stream: np.ndarray  # -1 for CPU events
    category: np.ndarray
    name: np.ndarray
    ts: np.ndarray  # int64
    dur: np.ndarray  # int64
    correlation: np.ndarray
    wait_on_stream: np.ndarray
    wait_on_correlation: np.ndarray

    end: np.ndarray = field(init=False)
    is_gpu: np.ndarray = field(init=False)  # has a stream (kernels, copies, syncs)

    def __post_init__(self) -> None:
        self.end = self.ts + self.dur
        self.is_gpu = self.stream != NONE

    def __len__(self) -> int:
        return len(self.index)


def rank_groups(con: duckdb.DuckDBPyConnection) -> list[tuple[str, int]]:
    """Every (run, rank) with profiler events."""
    return [
        (run_id, rank)
        for run_id, rank in con.sql(
            "SELECT DISTINCT run_id, coalesce(rank, -1) FROM _timeline_events_files ORDER BY ALL"
        ).fetchall()
    ]


def load_rank(con: duckdb.DuckDBPyConnection, run_id: str, rank: int) -> RankEvents:
    """A rank's events; times rounded inwards to whole microseconds, as HTA rounds them
    (start up, end down: an event shorter than a microsecond that spans no whole one
    ends before it starts)."""
    table = con.sql(
        f"SELECT {_COLUMNS} FROM _timeline_events_files WHERE run_id = {quote_literal(run_id)} "
        f"AND coalesce(rank, -1) = {int(rank)} ORDER BY event_idx"
    ).to_arrow_table()
    column = {name: table[name].to_numpy() for name in table.column_names}
    ts = np.ceil(column["ts_us"])
    dur = np.floor(column["ts_us"] + column["dur_us"]) - ts
    pid = table["pid"].to_pylist()
    tid = table["tid"].to_pylist()
    return RankEvents(
        run_id=run_id,
        rank=rank,
        index=column["event_idx"].astype(np.int64),
        thread=np.array([f"{p}/{t}" for p, t in zip(pid, tid, strict=True)], dtype=object),
        stream=column["stream"].astype(np.int64),
        category=np.array(table["category"].to_pylist(), dtype=object),
        name=np.array(table["name"].to_pylist(), dtype=object),
        ts=ts.astype(np.int64),
        dur=dur.astype(np.int64),
        correlation=column["correlation"].astype(np.int64),
        wait_on_stream=column["wait_on_stream"].astype(np.int64),
        wait_on_correlation=column["wait_on_correlation"].astype(np.int64),
    )


def cpu_gpu_links(events: RankEvents) -> np.ndarray:
    """Per event, the row of the event it is linked to by correlation (a runtime call to
    its GPU event and back), else -1.  Where several GPU events share one correlation (a
    CUDA graph launch), the runtime call points at the last and each GPU event at it.  An
    Event Sync or Context Sync on no stream counts as a GPU event here, as HTA counts
    it: it links to the runtime call that waited on it."""
    linked = np.full(len(events), NONE, np.int64)
    has_id = events.correlation != NONE
    on_gpu = has_id & (events.is_gpu | np.isin(events.name, DEVICE_SYNCS))
    gpu_rows = np.flatnonzero(on_gpu).tolist()
    gpu_by_id = {int(events.correlation[row]): row for row in gpu_rows}
    cpu_by_id: dict[int, int] = {}
    for row in np.flatnonzero(has_id & ~on_gpu).tolist():
        correlation = int(events.correlation[row])
        if correlation in gpu_by_id:
            linked[row] = gpu_by_id[correlation]
            cpu_by_id[correlation] = row
    for row in gpu_rows:
        linked[row] = cpu_by_id.get(int(events.correlation[row]), NONE)
    return linked


@dataclass
class CallStacks:
    """Parent (row, -1 at the top of a thread) and depth (0 at the top) per event; GPU
    events sit under their launching runtime call, unlinked ones have depth -1."""

    parent: np.ndarray
    depth: np.ndarray
    children: list[list[int]]
    roots: dict[str, list[int]]  # per CPU thread, its top-level events in order


def call_stacks(
    events: RankEvents, rows: np.ndarray, links: np.ndarray, link_backward: bool = True
) -> CallStacks:
    """Nest the CPU events among ``rows`` per thread and hang each GPU event among them
    under its runtime call; with ``link_backward``, the backward thread's events under
    the step that spans them."""
    n = len(events)
    parent = np.full(n, NONE, np.int64)
    depth = np.full(n, NONE, np.int64)
    children: list[list[int]] = [[] for _ in range(n)]
    roots: dict[str, list[int]] = {}
    cpu = rows[~events.is_gpu[rows]]
    for thread in dict.fromkeys(events.thread[cpu]):
        mine = cpu[events.thread[cpu] == thread]
        top: list[int] = []
        stack: list[int] = []
        for row, opens in _ordered_ends(events, mine):
            if opens:
                if stack:
                    parent[row] = stack[-1]
                    depth[row] = depth[stack[-1]] + 1
                    children[stack[-1]].append(row)
                else:
                    depth[row] = 0
                    top.append(row)
                stack.append(row)
            elif stack:
                stack.pop()
        roots[thread] = top
    if link_backward:
        _attach_backward_thread(events, roots, parent, depth, children)
    in_rows = np.zeros(n, bool)
    in_rows[rows] = True
    for row in rows[events.is_gpu[rows]]:
        launch = links[row]
        if launch != NONE and in_rows[launch] and not events.is_gpu[launch] and depth[launch] >= 0:
            parent[row] = launch
            depth[row] = depth[launch] + 1
            children[launch].append(int(row))
    return CallStacks(parent, depth, children, roots)


def _attach_backward_thread(
    events: RankEvents,
    roots: dict[str, list[int]],
    parent: np.ndarray,
    depth: np.ndarray,
    children: list[list[int]],
) -> None:
    """Where one thread runs the steps (``ProfilerStep#``) and one other the backward
    pass (``autograd::``), hang the backward thread's top-level events under the step
    (or ``## backward ##`` annotation) of the main thread that spans them, as HTA does."""
    labels = {thread: _thread_label(events, top, children) for thread, top in roots.items()}
    main = [thread for thread, label in labels.items() if label == "main"]
    backward = [thread for thread, label in labels.items() if label == "bwd"]
    if len(main) != 1 or len(backward) != 1:
        return
    main_rows = _subtree_rows(roots[main[0]], children)
    for prefix in ("## backward ##", "ProfilerStep#"):
        anchors = [row for row in main_rows if events.name[row].startswith(prefix)]
        if anchors:
            break
    end = events.end
    for anchor in anchors:
        top = roots[backward[0]]
        moved = [
            row for row in top if events.ts[row] >= events.ts[anchor] and end[row] <= end[anchor]
        ]
        for row in moved:
            parent[row] = anchor
            children[anchor].append(row)
        moved_rows = set(moved)
        roots[backward[0]] = [row for row in top if row not in moved_rows]
        pending = list(moved)
        while pending:
            row = pending.pop()
            depth[row] = depth[parent[row]] + 1
            pending.extend(children[row])


def _thread_label(events: RankEvents, top: list[int], children: list[list[int]]) -> str:
    names = [events.name[row] for row in _subtree_rows(top, children)]
    if any(name.startswith("ProfilerStep#") for name in names):
        return "main"
    if any("autograd::" in name for name in names):
        return "bwd"
    return "other"


def _subtree_rows(top: list[int], children: list[list[int]]) -> list[int]:
    """The rows of ``top`` and every row beneath them, in trace order."""
    found: list[int] = []
    pending = list(top)
    while pending:
        row = pending.pop()
        found.append(row)
        pending.extend(children[row])
    return sorted(found)


def _ordered_ends(events: RankEvents, rows: np.ndarray) -> list[tuple[int, bool]]:
    """The starts and ends of ``rows`` in HTA's order: by time; at one instant ends
    before starts, a longer event's start first and a shorter one's end first, then by
    trace order (starts) or reverse trace order (ends); an instantaneous event opens and
    closes after the starts of its instant."""
    ts, dur = events.ts[rows], events.dur[rows]
    ends = []
    for row, start, length in zip(rows.tolist(), ts.tolist(), dur.tolist(), strict=True):
        if length == 0:
            ends.append((start, 2, 0, row, row, True))
            ends.append((start, 2, 1, row, row, False))
        else:
            ends.append((start, 1, -length, row, row, True))
            ends.append((start + length, 0, length, -row, row, False))
    ends.sort(key=lambda end: end[:4])
    return [(end[4], end[5]) for end in ends]


def descendants(stacks: CallStacks, row: int) -> list[int]:
    """Every event under ``row`` (GPU events included), in trace order."""
    return _subtree_rows(stacks.children[row], stacks.children)
