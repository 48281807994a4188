"""Wall-clock rows as trace events: DSA steps, pool snapshots, engine metrics and the
serving counters kvtrace maps them onto, KV-event residency and request spans, each from
0 at its run's start (see the queries' header).

Counter events (``"ph": "C"``) are drawn by Perfetto as one track per (process, event
name, args key), named ``<name> <key>`` (google/perfetto
``src/trace_processor/importers/json/json_trace_parser_impl.cc`` at 74fbed7d): each
writer names its events by what they describe (a layer, a worker) and keys their args by
the quantity.
"""

from __future__ import annotations

from typing import Any

from kvtrace.export._lanes import Lanes
from kvtrace.export._profiler import labels_suffix
from kvtrace.export._run import RunExport, seconds_to_us, write_counter_groups

_POOL_COUNTERS = (
    "capacity tokens",
    "held tokens",
    "available tokens",
    "other tokens",
    "idle evictable tokens",
    "sessions",
    "running batch size",
)
_REQUESTS_OF = {  # the table a request comes from -> its process
    "request_timings": "benchmark requests",
    "request_metrics": "serving requests",
    "requests": "traced requests",
}


def write_dsa(run: RunExport) -> int:
    """A thread per layer with a slice per decode step and per prefill step (the step's
    wall time; the requests of a batched step together), and per layer the counters
    unique blocks and fetch bytes of the decode steps, at the run's
    `RunExport.dsa_block_size`; returns the events written."""
    block_size = run.dsa_block_size
    run.con.execute("SET VARIABLE kvtrace_export_block_size = ?", [block_size])
    pid = run.process(f"DSA steps (block size {block_size})", block_size)
    written = 0
    for rows in run.rows("dsa_layer_steps"):
        events: list[dict[str, Any]] = []
        for phase, layer, t_us, dur_us, batch_step, requests, *values in rows:
            unique, hbm, local, remote, fetch, query_tokens = values
            tid = layer + 1  # tid 0 is no thread in Perfetto
            run.writer.thread(pid, tid, f"layer {layer}")
            args = {
                "batch step": batch_step,
                "requests": requests,
                "query tokens": query_tokens,
                "unique blocks": unique,
                "fetch bytes": fetch,
                "hbm bytes": hbm,
                "local_pool bytes": local,
                "remote_pool bytes": remote,
            }
            events.append(
                {
                    "ph": "X",
                    "cat": "dsa",
                    "name": f"{phase} step",
                    "pid": pid,
                    "tid": tid,
                    "ts": t_us,
                    "dur": dur_us or 0.0,
                    "args": _known(args),
                }
            )
            counters = _known({"unique blocks": unique, "fetch bytes": fetch})
            if counters:
                events.append(
                    {"ph": "C", "name": f"layer {layer}", "pid": pid, "ts": t_us, "args": counters}
                )
        run.writer.write(events)
        written += len(events)
    return written


def write_pool(run: RunExport) -> int:
    """A counter event per worker and tick (its pool counters as args); a failed poll
    as an instant on the worker's thread."""
    pid = run.process("pool")
    tids: dict[str, int] = {}
    written = 0
    for rows in run.rows("pool_ticks"):
        events: list[dict[str, Any]] = []
        for worker, t_s, *values, error in rows:
            ts = seconds_to_us(t_s)
            counters = _known(dict(zip(_POOL_COUNTERS, values, strict=True)))
            if counters:
                events.append({"ph": "C", "name": worker, "pid": pid, "ts": ts, "args": counters})
            if error is not None:
                tid = tids.setdefault(worker, len(tids) + 1)
                run.writer.thread(pid, tid, worker)
                events.append(
                    {
                        "ph": "i",
                        "s": "t",
                        "name": "poll error",
                        "pid": pid,
                        "tid": tid,
                        "ts": ts,
                        "args": {"error": error},
                    }
                )
        run.writer.write(events)
        written += len(events)
    return written


def write_engine(run: RunExport) -> int:
    """A counter event per worker and scrape, each sample an arg named by its metric
    and labels."""
    pid = run.process("engine metrics")
    return write_counter_groups(
        run,
        "engine_samples",
        group=lambda row: (row[0], row[1]),  # worker, t_s
        event=lambda row: {"ph": "C", "name": row[0], "pid": pid, "ts": seconds_to_us(row[1])},
        arg=lambda row: (row[2] + labels_suffix(row[3]), row[4]),
    )


def write_serving(run: RunExport) -> int:
    """A counter event per worker and scrape, each quantity (``quantity[part]``) an
    arg."""
    pid = run.process("serving counters")
    return write_counter_groups(
        run,
        "serving_quantities",
        group=lambda row: (row[0], row[1]),  # worker, t_s
        event=lambda row: {"ph": "C", "name": row[0], "pid": pid, "ts": seconds_to_us(row[1])},
        arg=lambda row: (row[2] if row[3] is None else f"{row[2]}[{row[3]}]", row[4]),
    )


def write_kv_residency(run: RunExport) -> int:
    """A counter event per worker, medium and bucket: the blocks resident at the
    bucket's end, drawn from the bucket's start."""
    pid = run.process("KV events")
    written = 0
    for rows in run.rows("kv_residency"):
        events = [
            {
                "ph": "C",
                "name": worker if medium is None else f"{worker} {medium}",
                "pid": pid,
                "ts": seconds_to_us(t_s),
                "args": {"resident blocks": resident},
            }
            for worker, medium, t_s, resident in rows
        ]
        run.writer.write(events)
        written += len(events)
    return written


def write_requests(run: RunExport) -> int:
    """A slice per request from its arrival to its end (0 long when it never ended),
    with its time to first token as a slice inside it, on the lowest lane free at its
    arrival: a process per source table (and load level, where a run has several)."""
    written = 0
    lanes, process = Lanes(), None
    for rows in run.rows("request_spans"):
        events: list[dict[str, Any]] = []
        for origin, level, levels, request, arrival_s, ttft_s, latency_s, tokens in (
            (r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7:]) for r in rows
        ):
            if (origin, level) != process:
                process, lanes = (origin, level), Lanes()
            part = _REQUESTS_OF[origin] + (f" · load level {level}" if levels else "")
            pid = run.process(part, origin, level)
            start = seconds_to_us(arrival_s)
            length = seconds_to_us(latency_s) if latency_s is not None else 0.0
            tid = lanes.take(start, start + length) + 1
            run.writer.thread(pid, tid, f"lane {tid}")
            input_tokens, output_tokens, error = tokens
            args = {
                "request": request,
                "input tokens": input_tokens,
                "output tokens": output_tokens,
                "ttft s": ttft_s,
                "latency s": latency_s,
                "error": error,
            }
            span = {"ph": "X", "cat": "request", "pid": pid, "tid": tid, "ts": start}
            events.append({**span, "name": "request", "dur": length, "args": _known(args)})
            if ttft_s is not None and latency_s is not None:
                # inside its request even where a tool's TTFT exceeds its latency
                events.append({**span, "name": "TTFT", "dur": min(seconds_to_us(ttft_s), length)})
        run.writer.write(events)
        written += len(events)
    return written


def _known(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` less the unknown (None) ones."""
    return {key: value for key, value in values.items() if value is not None}
