"""The critical path of an iteration (``timeline_critical_path``), as HTA 0.5's critical
path analysis finds it.

A window is the span of one instance of an annotation (``ProfilerStep`` instance 0 is
the first ``ProfilerStep#N``).  Its CPU events that last longer than zero, and the GPU
events launched from the window, become a graph: a start and an end node per CPU
operator, runtime call and GPU event, and edges for

- an operator's time between the nodes of its thread's call stack (nested calls split
  their parent), attributed to the innermost operator running;
- a dependency between consecutive top-level operators of a thread (weight 0);
- a GPU event's run; the gap to the previous event on its stream (kernel-kernel delay);
  or, when the stream was empty and the launch came after everything it waited on,
  the launch call's start to the kernel's start (launch delay);
- synchronisation: a stream or context sync ties the last GPU event of the stream(s)
  to the end of the runtime call that waited; an event sync likewise; a stream waiting
  on an event (cudaStreamWaitEvent) ties the kernel before the cudaEventRecord to the
  next kernel launched onto the waiting stream (weight 0 each).

A blocking runtime call (cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventQuery,
cudaEventSynchronize, cudaMemcpy, cudaMemcpyAsync) weighs 0: the time it waits is the
GPU's, reached through its sync edge.  The critical path is the longest path through
the graph; each of its edges is bound by the CPU, GPU compute, GPU communication, a
kernel-kernel gap or a launch delay.

``definitions := 'hta'`` reproduces HTA's graph, where a CUDA-graph launch (several GPU
events under one correlation id) keeps only its last kernel; ``'kvtrace'`` keeps every
kernel of the launch, each on its own stream's chain.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np

from kvtrace.analysis.timeline_stacks import (
    DEVICE_SYNCS,
    NONE,
    CallStacks,
    RankEvents,
    call_stacks,
    cpu_gpu_links,
    load_rank,
    rank_groups,
)
from kvtrace.errors import InputError

LAUNCH_CALLS = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cuLaunchKernel",
        "cudaMemcpyAsync",
        "cudaMemsetAsync",
        "cudaGraphLaunch",
        "hipLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipMemsetAsync",
        "hipMemcpyAsync",
        "hipMemcpyWithStream",
    }
)
HTA_LAUNCH_CALLS = LAUNCH_CALLS - {"cudaGraphLaunch"}
BLOCKING_CALLS = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventQuery",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cudaMemcpyAsync",
    }
)
NODE_CATEGORIES = frozenset({"cpu_op", "cuda_runtime", "cuda_driver"})
_COMMUNICATION = re.compile(r"^nccl.*Kernel")

OPERATOR, DEPENDENCY, LAUNCH_DELAY, KERNEL_DELAY, SYNC = (
    "operator",
    "dependency",
    "kernel_launch_delay",
    "kernel_kernel_delay",
    "sync_dependency",
)


def critical_path_rows(
    con: duckdb.DuckDBPyConnection, annotation: str, instance: int, definitions: str
) -> list[dict[str, Any]]:
    """The edges of each run and rank's critical path, in path order."""
    if definitions not in ("kvtrace", "hta"):
        raise InputError(f"definitions must be 'kvtrace' or 'hta', got {definitions!r}")
    if instance is None or instance < 0:
        raise InputError(f"the instance must be 0 or more, got {instance}")
    rows: list[dict[str, Any]] = []
    for run_id, rank in rank_groups(con):
        events = load_rank(con, run_id, rank)
        graph = _Graph.build(events, annotation, instance, definitions == "hta")
        if graph is None:
            continue
        for step, edge in enumerate(graph.critical_path()):
            event = edge.event
            rows.append(
                {
                    "run_id": run_id,
                    "rank": rank,
                    "step": step,
                    "edge_type": edge.kind,
                    "event_idx": None if event is None else int(events.index[event]),
                    "name": None if event is None else events.name[event],
                    "category": None if event is None else events.category[event],
                    "stream": None
                    if event is None or not events.is_gpu[event]
                    else int(events.stream[event]),
                    "bound_by": _bound_by(events, edge),
                    "duration_us": float(edge.weight),
                }
            )
    return rows


def _bound_by(events: RankEvents, edge: _Edge) -> str | None:
    if edge.kind == KERNEL_DELAY:
        return "gpu_kernel_kernel_overhead"
    if edge.kind == LAUNCH_DELAY:
        return "gpu_kernel_launch_overhead"
    if edge.kind in (DEPENDENCY, SYNC) or edge.event is None:
        return None
    if not events.is_gpu[edge.event]:
        return "cpu_bound"
    if _COMMUNICATION.match(events.name[edge.event]):
        return "gpu_communication_bound"
    return "gpu_compute_bound"


@dataclass
class _Edge:
    kind: str
    weight: float  # as reported; the path search counts a weight of -1 or less as 0
    event: int | None  # the row the edge's time belongs to


@dataclass
class _Node:
    row: int
    ts: int
    is_start: bool
    is_blocking: bool


class _Graph:
    """Nodes in time order; edges kept in insertion order per node, as the path search's
    tie-breaking depends on it."""

    def __init__(self, events: RankEvents, links: np.ndarray, hta: bool) -> None:
        self.events = events
        self.links = links
        self.hta = hta
        self.nodes: list[_Node] = []
        self.start_of: dict[int, int] = {}
        self.end_of: dict[int, int] = {}
        self.succ: list[dict[int, _Edge]] = []
        self.pred: list[dict[int, _Edge]] = []

    @classmethod
    def build(cls, events: RankEvents, annotation: str, instance: int, hta: bool) -> _Graph | None:
        links = cpu_gpu_links(events)
        rows = _window_rows(events, links, annotation, instance, hta)
        if rows is None:
            return None
        graph = cls(events, links, hta)
        graph._add_nodes(rows)
        stacks = call_stacks(events, rows, links, link_backward=False)  # each thread apart
        graph._add_call_stack_edges(stacks)
        graph._add_gpu_edges(rows)
        graph._check()
        return graph

    # -- nodes --------------------------------------------------------------------------

    def _add_nodes(self, rows: np.ndarray) -> None:
        ev = self.events
        with_node = rows[
            np.isin(ev.category[rows], list(NODE_CATEGORIES))
            | (ev.is_gpu[rows] & (ev.correlation[rows] >= 0))
        ]
        times = np.concatenate([ev.ts[with_node], ev.end[with_node]])
        order = np.argsort(times, kind="stable")
        count = len(with_node)
        for node_id, position in enumerate(order.tolist()):
            row = int(with_node[position % count])
            is_start = position < count
            self.nodes.append(
                _Node(row, int(times[position]), is_start, ev.name[row] in BLOCKING_CALLS)
            )
            (self.start_of if is_start else self.end_of)[row] = node_id
            self.succ.append({})
            self.pred.append({})

    def _edge(
        self, src: int, dest: int, kind: str, zero: bool = False, src_parent: int = NONE
    ) -> None:
        """Add (or replace, in its place, as networkx does) the edge src -> dest; an
        operator or kernel-kernel edge is attributed to the event whose time it is."""
        timed = not zero and kind not in (DEPENDENCY, SYNC)
        weight = self.nodes[dest].ts - self.nodes[src].ts if timed else 0
        edge = _Edge(kind, weight, None)
        if kind in (OPERATOR, KERNEL_DELAY):
            edge.event = self._attributed(kind, src, dest, src_parent)
        self.succ[src][dest] = edge
        self.pred[dest][src] = edge

    def _attributed(self, kind: str, src: int, dest: int, src_parent: int) -> int | None:
        """The event an edge's time belongs to: the source's when it starts there (or
        for a gap between kernels), the target's when it ends there, else the parent
        running between two calls."""
        source, target = self.nodes[src], self.nodes[dest]
        if kind == KERNEL_DELAY or source.is_start:
            return source.row
        if not target.is_start:
            return target.row
        return src_parent if src_parent >= 0 else None

    # -- CPU call stacks ----------------------------------------------------------------

    def _add_call_stack_edges(self, stacks: CallStacks) -> None:
        for thread in _thread_order(stacks.roots):
            self._walk_thread(stacks, stacks.roots[thread])

    def _walk_thread(self, stacks: CallStacks, top: list[int]) -> None:
        last_node: int | None = None
        last_top: int | None = None
        last_parent = NONE
        depth = 0
        # an explicit stack of (row, entered) replaces recursion: traces nest deeply
        pending: list[tuple[int, bool]] = [(row, False) for row in reversed(top)]
        while pending:
            row, entered = pending.pop()
            start, end = self.start_of.get(row), self.end_of.get(row)
            if not entered:
                pending.append((row, True))
                pending.extend(
                    (child, False)
                    for child in reversed(stacks.children[row])
                    if not self.events.is_gpu[child]
                )
                if start is None or end is None:
                    continue
                if depth == 0 and last_top is not None:
                    self._edge(last_top, start, DEPENDENCY)
                depth += 1
                if last_node is not None:
                    self._edge(last_node, start, OPERATOR, src_parent=last_parent)
                last_node, last_parent = start, int(stacks.parent[row])
                continue
            if start is None or end is None:
                continue
            depth -= 1
            if last_node is not None:
                blocking = self.nodes[start].is_blocking
                self._edge(last_node, end, OPERATOR, zero=blocking, src_parent=last_parent)
            if depth == 0:
                last_node, last_top = None, end
            else:
                last_node, last_parent = end, int(stacks.parent[row])

    # -- GPU events ---------------------------------------------------------------------

    def _add_gpu_edges(self, rows: np.ndarray) -> None:
        ev = self.events
        launches = _launches(ev, self.links, self.hta)
        queue, later_of_call = _queue_lengths(ev, self.links, launches, self.hta)
        record_launch = _launch_before_event_records(ev, self.links, launches)
        wait_launch = _launch_after_stream_waits(ev, self.links, launches)
        device_syncs = np.isin(ev.name[rows], DEVICE_SYNCS)
        gpu = rows[(ev.is_gpu[rows] | device_syncs) & (ev.correlation[rows] >= 0)]
        is_sync = ev.category[gpu] == "cuda_sync"
        sort_by = np.where(is_sync, ev.end[gpu], ev.ts[gpu])
        last_on_stream: dict[int, int] = {}
        kernel_sync: dict[int, int | None] = {}
        for row in gpu[np.argsort(sort_by, kind="stable")].tolist():
            if ev.category[row] == "cuda_sync":
                self._sync(row, last_on_stream, kernel_sync, record_launch, wait_launch)
                continue
            start, end = self.start_of[row], self.end_of[row]
            self._edge(start, end, OPERATOR)
            stream = int(ev.stream[row])
            runtime = int(self.links[row])
            waited = kernel_sync.get(row)
            waited_end = None
            if waited is not None:
                waited_end = self.end_of.get(waited)
                if waited_end is not None:
                    self._edge(waited_end, start, SYNC)
                kernel_sync[row] = None
            previous = last_on_stream.get(stream)
            runtime_ts = int(ev.ts[runtime])
            if (
                runtime in self.start_of
                and queue.get(runtime) == 1
                and queue.get(row) == later_of_call.get(row, 0)
                and (previous is None or self.nodes[previous].ts < runtime_ts)
                and (waited_end is None or self.nodes[waited_end].ts < runtime_ts)
            ):
                self._edge(self.start_of[runtime], start, LAUNCH_DELAY)
            elif previous is not None and (
                waited_end is None or self.nodes[waited_end].ts < self.nodes[previous].ts
            ):
                self._edge(previous, start, KERNEL_DELAY)
            last_on_stream[stream] = end

    def _sync(
        self,
        row: int,
        last_on_stream: dict[int, int],
        kernel_sync: dict[int, int | None],
        record_launch: dict[int, int],
        wait_launch: dict[int, int],
    ) -> None:
        ev, links = self.events, self.links
        name = ev.name[row]
        runtime = int(links[row])
        if name in ("Stream Wait Event", "Event Sync"):
            launch = record_launch.get(int(ev.wait_on_correlation[row]), NONE)
            if ev.wait_on_correlation[row] == NONE or launch == NONE:
                return
            source = int(links[launch])
            if name == "Stream Wait Event":
                next_launch = wait_launch.get(runtime, NONE)
                if next_launch != NONE:
                    kernel_sync[int(links[next_launch])] = source
            elif (source_end := self.end_of.get(source)) is not None and runtime in self.end_of:
                self._edge(source_end, self.end_of[runtime], SYNC)
            return
        waited: list[int | None]
        if name == "Context Sync":
            waited = list(last_on_stream.values())
        elif name == "Stream Sync":
            waited = [last_on_stream.get(int(ev.stream[row]))]
        else:
            return
        for node in waited:
            if node is not None and runtime in self.end_of:
                self._edge(node, self.end_of[runtime], SYNC)

    def _check(self) -> None:
        """Refuse graphs HTA refuses: a sync between events of one stream, or a cycle."""
        ev = self.events
        for src, targets in enumerate(self.succ):
            for dest, edge in targets.items():
                if edge.kind != SYNC:
                    continue
                a, b = self.nodes[src].row, self.nodes[dest].row
                if ev.is_gpu[a] and ev.is_gpu[b] and ev.stream[a] == ev.stream[b]:
                    raise InputError(
                        f"run {ev.run_id}: a CUDA sync ties two events of stream "
                        f"{ev.stream[a]}; the trace's sync events are inconsistent"
                    )

    # -- the longest path ---------------------------------------------------------------

    def critical_path(self) -> list[_Edge]:
        """The edges of the longest path (ties broken as networkx's dag_longest_path
        breaks them, in generation-wise topological order)."""
        order = self._topological_order()
        best: dict[int, tuple[float, int]] = {}
        for node in order:
            choices = [
                (best[src][0] + (0 if edge.weight <= -1 else edge.weight), src)
                for src, edge in self.pred[node].items()
            ]
            chosen = max(choices, key=lambda choice: choice[0]) if choices else (0, node)
            best[node] = chosen if chosen[0] >= 0 else (0, node)
        if not best:
            return []
        node = max(best, key=lambda n: best[n][0])
        path = [node]
        while best[node][1] != node:
            node = best[node][1]
            path.append(node)
        path.reverse()
        return [self.succ[a][b] for a, b in itertools.pairwise(path)]

    def _topological_order(self) -> list[int]:
        indegree = [len(p) for p in self.pred]
        generation = [node for node, d in enumerate(indegree) if d == 0]
        order: list[int] = []
        while generation:
            following: list[int] = []
            for node in generation:
                for child in self.succ[node]:
                    indegree[child] -= 1
                    if indegree[child] == 0:
                        following.append(child)
            order.extend(generation)
            generation = following
        if len(order) != len(self.nodes):
            raise InputError(
                f"run {self.events.run_id}: the critical path graph has a cycle; "
                "the trace's events overlap in ways no run can"
            )
        return order


def _thread_order(roots: dict[str, list[int]]) -> list[str]:
    """Threads by (pid, tid), numerically where they are numbers."""

    def key(thread: str) -> tuple[tuple[int, int | str], ...]:
        return tuple((0, int(p)) if p.lstrip("-").isdigit() else (1, p) for p in thread.split("/"))

    return sorted(roots, key=key)


def _window_rows(
    events: RankEvents, links: np.ndarray, annotation: str, instance: int, hta: bool
) -> np.ndarray | None:
    """The rows of the window: CPU events starting in it (longer than 0) and GPU events
    whose launch call does (and every Stream Wait Event)."""
    ev = events
    matching = np.flatnonzero(np.array([annotation in n for n in ev.name], bool))
    if annotation == "":
        start, end = ev.ts.min(), ev.end.max()
    elif instance >= len(matching):
        return None
    else:
        start, end = ev.ts[matching[instance]], ev.end[matching[instance]]
    cpu = ~ev.is_gpu & (ev.ts >= start) & (ev.ts <= end) & (ev.dur > 0)
    launch = np.where(ev.is_gpu, links, NONE)
    known = launch != NONE
    by_cpu = np.zeros(len(ev), bool)
    by_cpu[known] = ~ev.is_gpu[launch[known]]
    if hta:  # HTA links a call to one GPU event: only that one counts as launched
        by_cpu[known] &= links[launch[known]] == np.flatnonzero(known)
    in_window = (ev.ts >= start) & (ev.ts <= end) & (ev.dur > 0)
    launched = np.zeros(len(ev), bool)
    launched[by_cpu] = in_window[launch[by_cpu]]
    stream_waits = ev.is_gpu & (ev.name == "Stream Wait Event")
    return np.flatnonzero(cpu | launched | stream_waits)


def _launches(events: RankEvents, links: np.ndarray, hta: bool) -> np.ndarray:
    """The runtime calls that launched a GPU event, in start order."""
    names = HTA_LAUNCH_CALLS if hta else LAUNCH_CALLS
    rows = np.flatnonzero(np.isin(events.name, list(names)) & (links != NONE))
    return rows[np.argsort(events.ts[rows], kind="stable")]


def _queue_lengths(
    events: RankEvents, links: np.ndarray, launches: np.ndarray, hta: bool
) -> tuple[dict[int, int], dict[int, int]]:
    """Per GPU event, the length of its stream's queue just after it starts; per launch
    call, one more than the length just before it (HTA's length after a one-kernel
    launch).  A launch adds its GPU events, a GPU event's start takes one away.  Also
    per GPU event, how many GPU events of the same call follow it on its stream (a
    CUDA graph's; 0 for HTA, which keeps one per call)."""
    ev = events
    calls = launches[np.argsort(ev.index[launches], kind="stable")]  # trace order, as HTA joins
    kernels_of = _kernels_of_calls(ev, links, calls, hta)
    later: dict[int, int] = {}
    for of_call in kernels_of.values():
        for stream in {int(ev.stream[k]) for k in of_call}:
            mine = sorted((k for k in of_call if ev.stream[k] == stream), key=lambda k: ev.ts[k])
            later.update({k: len(mine) - place - 1 for place, k in enumerate(mine)})
    kernels = np.array(sorted(k for ks in kernels_of.values() for k in ks), np.int64)
    merged = np.concatenate([calls, kernels])
    order = merged[np.argsort(ev.ts[merged], kind="stable")]
    length: dict[int, int] = defaultdict(int)
    found: dict[int, int] = {}
    for row in order.tolist():
        if ev.is_gpu[row]:
            stream = int(ev.stream[row])
            length[stream] -= 1
            found[row] = length[stream]
            continue
        kernels_here = kernels_of[row]
        if kernels_here:
            found[row] = length[int(ev.stream[kernels_here[-1]])] + 1
        for kernel in kernels_here:
            length[int(ev.stream[kernel])] += 1
    return found, later


def _kernels_of_calls(
    events: RankEvents, links: np.ndarray, calls: np.ndarray, hta: bool
) -> dict[int, list[int]]:
    """The GPU events of each launch call: HTA links one (the last of a CUDA graph)."""
    if hta:
        return {int(call): [int(links[call])] for call in calls}
    by_id: dict[int, list[int]] = defaultdict(list)
    for row in np.flatnonzero(events.is_gpu & (events.correlation != NONE)).tolist():
        by_id[int(events.correlation[row])].append(row)
    return {int(call): by_id[int(events.correlation[call])] for call in calls}


class _LaunchIndex:
    """Launch calls grouped by a key, each group in start order, to find the launch
    before or after a moment."""

    def __init__(self, events: RankEvents, launches: np.ndarray, key: Callable[[int], Any]):
        self.rows: dict[Any, list[int]] = defaultdict(list)
        for launch in launches.tolist():
            self.rows[key(launch)].append(launch)
        self.starts = {k: [int(events.ts[r]) for r in rows] for k, rows in self.rows.items()}

    def last_at_or_before(self, key: Any, ts: int) -> int:
        place = bisect.bisect_right(self.starts.get(key, []), ts)
        return self.rows[key][place - 1] if place else NONE

    def first_at_or_after(self, key: Any, ts: int) -> int:
        place = bisect.bisect_left(self.starts.get(key, []), ts)
        return self.rows[key][place] if place < len(self.starts.get(key, [])) else NONE


def _launch_before_event_records(
    events: RankEvents, links: np.ndarray, launches: np.ndarray
) -> dict[int, int]:
    """Per cudaEventRecord (by correlation): the last launch onto the recorded stream
    (and GPU) before it, or -1."""
    ev = events
    waits = np.flatnonzero(ev.wait_on_stream > NONE).tolist()
    recorded = {
        int(ev.wait_on_correlation[r]): (int(ev.wait_on_stream[r]), ev.thread[r].split("/")[0])
        for r in waits
    }
    index = _LaunchIndex(
        ev, launches, lambda r: (int(ev.stream[links[r]]), ev.thread[links[r]].split("/")[0])
    )
    found: dict[int, int] = {}
    for record in np.flatnonzero(ev.name == "cudaEventRecord").tolist():
        correlation = int(ev.correlation[record])
        if correlation in recorded:
            found[correlation] = index.last_at_or_before(recorded[correlation], int(ev.ts[record]))
    return found


def _launch_after_stream_waits(
    events: RankEvents, links: np.ndarray, launches: np.ndarray
) -> dict[int, int]:
    """Per cudaStreamWaitEvent call: the next launch from its thread onto the waiting
    stream, or -1."""
    ev = events
    index = _LaunchIndex(ev, launches, lambda r: (ev.thread[r], int(ev.stream[links[r]])))
    return {
        call: index.first_at_or_after(
            (ev.thread[call], int(ev.stream[links[call]])), int(ev.ts[call])
        )
        for call in np.flatnonzero((ev.name == "cudaStreamWaitEvent") & (links != NONE)).tolist()
    }
