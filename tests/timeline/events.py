"""Hand-made Kineto trace events for the timeline tests, and a hypothesis strategy for
small whole traces."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def kineto_event(
    cat: str, name: str, ts: float, dur: float, stream: int | None = None, **args: object
) -> dict:
    """A complete ("X") event: on a GPU stream's thread when ``stream`` is given (with
    device 0), else on the CPU thread."""
    extra = {"stream": stream, "device": 0} if stream is not None else {}
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 0 if stream is not None else 1,
        "tid": stream if stream is not None else 1,
        "ts": ts,
        "dur": dur,
        "args": {**extra, **args},
    }


# (runtime call, GPU category, GPU event names) of the launches a generated trace makes
_LAUNCHES = (
    ("cudaLaunchKernel", "kernel", ("sm90_gemm_bf16", "rms_norm_kernel")),
    ("cudaLaunchKernel", "kernel", ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL",)),
    ("cudaMemcpyAsync", "gpu_memcpy", ("Memcpy HtoD (Pinned -> Device)",)),
    ("cudaMemcpyAsync", "gpu_memcpy", ("Memcpy DtoH (Device -> Pinned)",)),
    ("cudaMemsetAsync", "gpu_memset", ("Memset (Device)",)),
)
# (runtime call, sync event) of the waits on the GPU, which a trace puts on stream -1
_DEVICE_SYNCS = (
    ("cudaEventSynchronize", "Event Sync"),
    ("cudaDeviceSynchronize", "Context Sync"),
)

# Times: whole microseconds, quarters (exact in binary) or Kineto's nanoseconds, on a
# small range so that events often start, or start and end, at the same instant.
_TIMES = st.one_of(
    st.integers(0, 60).map(float),
    st.integers(0, 240).map(lambda quarter: quarter / 4),
    st.integers(0, 60_000).map(lambda ns: ns / 1000),
)
_DURATIONS = st.one_of(
    st.just(0.0),
    st.integers(0, 12).map(float),
    st.integers(1, 48).map(lambda quarter: quarter / 4),
    st.integers(1, 9_999).map(lambda ns: ns / 1000),
)
_BASE_US = 1_000_000.0  # where a generated trace starts (HTA moves its start to 0)


@st.composite
def kineto_traces(draw: st.DrawFn) -> dict[str, Any]:
    """A small one-rank Kineto trace: ProfilerSteps (none to three), launches of kernels,
    copies and memsets onto two streams (each a CUDA runtime call and a GPU event of one
    correlation id, the event starting no sooner than the call), GPU events no CPU call
    launched, and Event / Context Syncs on stream -1 with the call that waited.  Times
    are fractional or whole, durations may be 0, and instants repeat."""
    events: list[dict[str, Any]] = []
    step_start = _BASE_US
    for number in range(draw(st.integers(0, 3))):
        length = draw(st.integers(20, 40))
        events.append(kineto_event("user_annotation", f"ProfilerStep#{number}", step_start, length))
        step_start += length
    correlation = 0
    for _ in range(draw(st.integers(1, 10))):
        correlation += 1
        call, category, names = draw(st.sampled_from(_LAUNCHES))
        call_ts = _BASE_US + draw(_TIMES)
        events.append(
            kineto_event("cuda_runtime", call, call_ts, draw(_DURATIONS), correlation=correlation)
        )
        bandwidth = {"memory bandwidth (GB/s)": draw(st.integers(1, 50)) / 2}
        events.append(
            kineto_event(
                category,
                draw(st.sampled_from(names)),
                call_ts + draw(_TIMES) / 4,
                draw(_DURATIONS),
                stream=draw(st.sampled_from([7, 8])),
                correlation=correlation,
                **(bandwidth if category != "kernel" else {}),
            )
        )
    for _ in range(draw(st.integers(0, 2))):
        correlation += 1
        category, names = draw(st.sampled_from([(c, n) for _, c, n in _LAUNCHES]))
        events.append(
            kineto_event(
                category,
                draw(st.sampled_from(names)),
                _BASE_US + draw(_TIMES),
                draw(_DURATIONS),
                stream=draw(st.sampled_from([7, 8])),
                correlation=correlation,
            )
        )
    for _ in range(draw(st.integers(0, 2))):
        correlation += 1
        call, sync = draw(st.sampled_from(_DEVICE_SYNCS))
        start = _BASE_US + draw(_TIMES)
        length = draw(_DURATIONS)
        events.append(kineto_event("cuda_runtime", call, start, length, correlation=correlation))
        events.append(
            kineto_event("cuda_sync", sync, start, length, stream=-1, correlation=correlation)
        )
    # the trace opens with a metadata event, as Kineto's do (HTA links no event at place 0)
    name = {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}
    return {
        "distributedInfo": {"rank": 0, "world_size": 1},
        "traceEvents": [name, *draw(st.permutations(events))],
    }
