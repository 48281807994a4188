"""Write synthetic PyTorch profiler (Kineto) traces whose overlaps are chosen in advance.

The timeline imitates a layer-by-layer decode with KV or weight offload.  Per layer the
compute stream runs ``kernels_per_layer`` back-to-back kernels (``compute_us`` in all);
the copy-in stream prefetches the next layer's blocks (a ``Memcpy HtoD`` of ``h2d_us``
that starts ``h2d_hidden_us`` before the layer's compute ends, so that much of it hides
behind compute and the rest is exposed: the next layer waits for it); the copy-out stream
offloads the layer's blocks (a ``Memcpy DtoH`` of ``d2h_us``, ``d2h_hidden_us`` of it under
the compute); and, when ``comm_us`` > 0, a tensor-parallel all-reduce (an NCCL kernel,
``comm_hidden_us`` of it under the compute) follows on the communication stream.  The
first layer's blocks arrive before any compute, fully exposed.  Each iteration is a
``ProfilerStep#N`` with ``layer_<i>`` GPU annotations (from the previous layer's compute
end, or the iteration's start, to the layer's compute end), every GPU event has its CUDA
runtime launch (same correlation) ``launch_lead_us`` earlier, and iterations are apart
by ``step_gap_us`` of host time.  Times are whole microseconds, so every figure of
`TimelineShape.expected` is exact.

The traces are synthetic and say so (``"kvtrace_synthetic": true``); they serve tests
and benchmarks, never a result about a real system.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

COMPUTE_STREAM, H2D_STREAM, D2H_STREAM, COMM_STREAM = 7, 20, 21, 30
_BASE_US = 1_700_000_000_000_000  # Kineto's clock: microseconds since the epoch
_PID, _TID = 1000, 1001
_KERNEL_NAMES = (
    "rms_norm_kernel",
    "flash_fwd_splitkv_kernel",
    "sm90_xmma_gemm_bf16_kernel",
    "act_and_mul_kernel",
    "sm90_xmma_gemm_bf16_kernel_down",
)


@dataclass(frozen=True)
class TimelineShape:
    """What one rank's synthetic trace holds; all durations in whole microseconds."""

    iterations: int = 3
    layers: int = 4
    kernels_per_layer: int = 2
    compute_us: int = 200  # one layer's compute, split evenly over its kernels
    h2d_us: int = 120
    h2d_hidden_us: int = 80
    d2h_us: int = 60
    d2h_hidden_us: int = 50
    comm_us: int = 0
    comm_hidden_us: int = 0
    kernel_gap_us: int = 10  # between a layer's last wait and the next layer's compute
    launch_lead_us: int = 30
    launch_us: int = 5
    step_gap_us: int = 300
    copy_bytes_per_us: int = 20_000  # 20 GB/s
    gpu_annotations: bool = True  # layer_<i> spans on the GPU timeline

    def __post_init__(self) -> None:
        if self.compute_us % self.kernels_per_layer:
            raise ValueError("compute_us must split evenly over kernels_per_layer")
        for hidden, total, name in (
            (self.h2d_hidden_us, self.h2d_us, "h2d"),
            (self.d2h_hidden_us, self.d2h_us, "d2h"),
            (self.comm_hidden_us, self.comm_us, "comm"),
        ):
            if not 0 <= hidden <= min(total, self.compute_us):
                raise ValueError(f"{name}_hidden_us must lie in [0, min({name}_us, compute_us)]")
        if (
            max(self.d2h_us - self.d2h_hidden_us, self.comm_us - self.comm_hidden_us)
            > self.kernel_gap_us
        ):
            raise ValueError(
                "the exposed part of d2h_us and comm_us must fit in "
                "kernel_gap_us, before the next layer's compute"
            )

    # -- the schedule ---------------------------------------------------------------------

    @property
    def h2d_exposed_us(self) -> int:
        return self.h2d_us - self.h2d_hidden_us

    @property
    def _tail_us(self) -> int:
        """GPU time after a layer's compute ends that its offload and all-reduce run on."""
        return max(self.d2h_us - self.d2h_hidden_us, self.comm_us - self.comm_hidden_us)

    @property
    def iteration_us(self) -> int:
        """From an iteration's first GPU event's start to its last one's end."""
        waits = self.h2d_us + (self.layers - 1) * self.h2d_exposed_us
        return waits + self.layers * (self.kernel_gap_us + self.compute_us) + self._tail_us

    def expected(self) -> dict[str, float]:
        """Per-iteration and whole-trace figures worked out from the schedule."""
        layers, iterations = self.layers, self.iterations
        busy_after_compute = [
            max(self.h2d_exposed_us if i < layers - 1 else 0, self._tail_us) for i in range(layers)
        ]
        busy = self.h2d_us + layers * self.compute_us + sum(busy_after_compute)
        h2d_hidden = (layers - 1) * self.h2d_hidden_us
        d2h_hidden = layers * self.d2h_hidden_us
        span = iterations * self.iteration_us + (iterations - 1) * self.step_gap_us
        comm = layers * self.comm_us
        return {
            "iteration_us": self.iteration_us,
            "iteration_busy_us": busy,
            "iteration_idle_us": self.iteration_us - busy,
            "h2d_copy_us": layers * self.h2d_us,
            "h2d_overlapped_us": h2d_hidden,
            "h2d_exposed_us": layers * self.h2d_us - h2d_hidden,
            "d2h_copy_us": layers * self.d2h_us,
            "d2h_overlapped_us": d2h_hidden,
            "d2h_exposed_us": layers * (self.d2h_us - self.d2h_hidden_us),
            "compute_stream_busy_us": layers * self.compute_us,
            # HTA's temporal breakdown over the whole trace of a rank
            "kernel_time_us": span,
            "compute_time_us": iterations * layers * self.compute_us,
            "idle_time_us": span - iterations * busy,
            "non_compute_time_us": iterations * (busy - layers * self.compute_us),
            "comm_us": iterations * comm,
            "comm_overlapped_us": iterations * layers * self.comm_hidden_us,
            "memory_kernel_us": iterations * layers * (self.h2d_us + self.d2h_us),
        }


def write_timeline_trace(
    path: Path, shape: TimelineShape, *, rank: int = 0, world_size: int = 1
) -> Path:
    """Write one rank's trace (gzip when ``path`` ends in .gz) and return ``path``."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as out:
        out.write(
            json.dumps(
                {
                    "schemaVersion": 1,
                    "kvtrace_synthetic": True,
                    "kvtrace_shape": asdict(shape),
                    "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world_size},
                }
            )[:-1]
        )
        out.write(', "traceEvents": [\n')
        separator = ""
        for lines in _iterations(shape, rank):
            out.write(separator + ",\n".join(lines))
            separator = ",\n"
        out.write("\n]}\n")
    return path


def _iterations(shape: TimelineShape, rank: int) -> Iterator[list[str]]:
    """Each iteration's events, as JSON text (one iteration in memory at a time)."""
    writer = _EventWriter(shape, rank)
    clock = _BASE_US + rank * 7  # ranks start a few microseconds apart, as real ones do
    for iteration in range(shape.iterations):
        clock = writer.iteration(iteration, clock) + shape.step_gap_us
        yield writer.lines
        writer.lines = []


class _EventWriter:
    """Lays out one rank's iterations and collects their events as JSON text."""

    def __init__(self, shape: TimelineShape, rank: int) -> None:
        self.shape, self.rank = shape, rank
        self.lines: list[str] = []
        self.correlation = 1

    def iteration(self, number: int, start: int) -> int:
        """Lay out iteration ``number`` from GPU time ``start``; return its GPU end."""
        shape = self.shape
        first_line = len(self.lines)
        self._copy("HtoD", H2D_STREAM, start, shape.h2d_us)
        compute_start = start + shape.h2d_us + shape.kernel_gap_us
        layer_start = start
        for layer in range(shape.layers):
            compute_end = compute_start + shape.compute_us
            self._layer_kernels(compute_start)
            if shape.gpu_annotations:
                self._annotation(f"layer_{layer}", layer_start, compute_end)
            if shape.d2h_us:
                self._copy("DtoH", D2H_STREAM, compute_end - shape.d2h_hidden_us, shape.d2h_us)
            if shape.comm_us:
                self._launched(
                    "kernel",
                    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                    COMM_STREAM,
                    compute_end - shape.comm_hidden_us,
                    shape.comm_us,
                )
            wait = 0
            if layer < shape.layers - 1:
                self._copy("HtoD", H2D_STREAM, compute_end - shape.h2d_hidden_us, shape.h2d_us)
                wait = shape.h2d_exposed_us
            layer_start = compute_end
            compute_start = compute_end + wait + shape.kernel_gap_us
        end = start + shape.iteration_us
        step_start = start - shape.launch_lead_us
        self.lines.insert(
            first_line,
            _event(
                "user_annotation",
                f"ProfilerStep#{number}",
                _PID,
                _TID,
                step_start,
                end + 1 - step_start,
                {},
            ),
        )
        return end

    def _layer_kernels(self, start: int) -> None:
        each = self.shape.compute_us // self.shape.kernels_per_layer
        for k in range(self.shape.kernels_per_layer):
            self._launched(
                "kernel",
                _KERNEL_NAMES[k % len(_KERNEL_NAMES)],
                COMPUTE_STREAM,
                start + k * each,
                each,
            )

    def _copy(self, kind: str, stream: int, start: int, dur: int) -> None:
        target = "Pinned -> Device" if kind == "HtoD" else "Device -> Pinned"
        self._launched(
            "gpu_memcpy",
            f"Memcpy {kind} ({target})",
            stream,
            start,
            dur,
            {"bytes": dur * self.shape.copy_bytes_per_us},
        )

    def _annotation(self, name: str, start: int, end: int) -> None:
        self.lines.append(
            _event(
                "gpu_user_annotation",
                name,
                0,
                COMPUTE_STREAM,
                start,
                end - start,
                {"device": 0, "stream": COMPUTE_STREAM},
            )
        )

    def _launched(
        self, category: str, name: str, stream: int, start: int, dur: int, extra: dict | None = None
    ) -> None:
        """A GPU event and the CPU operator and runtime call that launched it."""
        shape, correlation = self.shape, self.correlation
        self.correlation += 1
        launch = start - shape.launch_lead_us
        runtime = "cudaLaunchKernel" if category == "kernel" else "cudaMemcpyAsync"
        self.lines.append(
            _event(
                "cpu_op",
                "aten::" + name.split("_")[0].lower(),
                _PID,
                _TID,
                launch - 1,
                shape.launch_us + 2,
                {"External id": correlation},
            )
        )
        self.lines.append(
            _event(
                "cuda_runtime",
                runtime,
                _PID,
                _TID,
                launch,
                shape.launch_us,
                {"correlation": correlation, "External id": correlation},
            )
        )
        self.lines.append(
            _event(
                category,
                name,
                0,
                stream,
                start,
                dur,
                {
                    "device": 0,
                    "stream": stream,
                    "correlation": correlation,
                    "External id": correlation,
                    **(extra or {}),
                },
            )
        )


def _event(category: str, name: str, pid: int, tid: int, ts: int, dur: int, args: dict) -> str:
    return json.dumps(
        {
            "ph": "X",
            "cat": category,
            "name": name,
            "pid": pid,
            "tid": tid,
            "ts": ts,
            "dur": dur,
            "args": args,
        }
    )
