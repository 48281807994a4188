"""What a traced step holds until it ends, and its one copy to the host.

The model-side half of `DsaTracer`.  A step's top-k comes as one row per query token
(``[k]``, ``[rows, k]`` or ``[batch, query_tokens, k]``); `StepLayout` says which rows
belong to which request and whether each request is decoding (one token past its prompt)
or prefilling a chunk of its prompt.  `StepRecords` keeps, per recorded layer and on the
tensors' own device, the decode rows as int32 copies (an engine may reuse its top-k
buffer for the next layer) and each prefill chunk reduced at once to how often each
position was selected; when the step ends it brings everything to the host in a single
transfer (one device synchronisation).  Torch tensors of any device and NumPy arrays
are accepted; torch is only imported when a tensor is recorded.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvtrace.errors import InputError

__all__ = [
    "CURRENT",
    "Backlog",
    "HostStep",
    "Part",
    "StepLayout",
    "StepRecords",
    "records_of",
    "yield_to_the_model",
]

BATCH_SECONDS = 1.0  # the writer thread gathers steps this long before writing them
BATCH_RECORDS = 4096
CURRENT: list[Any] = []
"""The tracer `kvtrace.record_topk` reports to, when one is open (`kvtrace.trace`)."""


@dataclass(frozen=True)
class Part:
    """One request's share of a step: its query tokens start at ``start`` and are the
    step's rows ``row`` to ``row + tokens``."""

    request_id: int
    start: int
    tokens: int
    row: int


@dataclass(frozen=True)
class StepLayout:
    """The rows of a step: decode parts (one row each) and the prefill chunks kept."""

    rows: int
    decode: tuple[Part, ...]
    prefill: tuple[Part, ...]

    @classmethod
    def of(
        cls,
        positions: Mapping[int, int | tuple[int, int]],
        query_tokens: int,
        prompt_tokens: Mapping[int, int],
        keep_prefill: bool,
    ) -> StepLayout:
        """``positions``: request id -> start position, or (start, query tokens).

        A request decodes when it has one query token at or past its prompt's end (any
        single token when its prompt is unknown); otherwise the step prefills a chunk
        of its prompt, kept only with ``keep_prefill``."""
        decode: list[Part] = []
        prefill: list[Part] = []
        row = 0
        for request_id, where in positions.items():
            start, tokens = where if isinstance(where, tuple) else (where, query_tokens)
            if tokens < 1 or start < 0:
                raise InputError(
                    f"request {request_id} has {tokens} query tokens from position {start}"
                )
            part = Part(request_id, start, tokens, row)
            if tokens == 1 and start >= prompt_tokens.get(request_id, 0):
                decode.append(part)
            elif keep_prefill:
                prefill.append(part)
            row += tokens
        return cls(row, tuple(decode), tuple(prefill))

    @property
    def traced(self) -> bool:
        return bool(self.decode or self.prefill)

    def decode_range(self) -> tuple[int, int] | None:
        """The decode rows as one range, when they are contiguous (the usual case)."""
        rows = [p.row for p in self.decode]
        if rows == list(range(rows[0], rows[0] + len(rows))):
            return rows[0], rows[0] + len(rows)
        return None


@dataclass
class HostStep:
    """A step on the host: decode top-k ``[layers, decode rows, k]`` (int32, -1 pads),
    their scores (floats) when every record had them, and each prefill chunk's counts
    (``counts[i][j]``: layer ``prefill_layers[i]``, chunk ``layout.prefill[j]``; entry p
    is how many of the chunk's query tokens selected position p)."""

    layout: StepLayout
    decode_layers: np.ndarray
    indices: np.ndarray | None
    scores: np.ndarray | None
    prefill_layers: np.ndarray
    counts: list[list[np.ndarray]]
    decode_groups: np.ndarray  # the KV group of each decode layer's record, -1: all heads

    @property
    def nbytes(self) -> int:
        held = [self.indices, self.scores, *(c for layer in self.counts for c in layer)]
        return sum(a.nbytes for a in held if a is not None)


@dataclass
class StepRecords:
    """The records of one step, on their devices until `to_host`."""

    layout: StepLayout
    decode_layers: list[int] = field(default_factory=list)
    decode_groups: list[int] = field(default_factory=list)
    indices: list[Any] = field(default_factory=list)
    scores: list[Any] = field(default_factory=list)
    prefill_layers: list[int] = field(default_factory=list)
    counts: list[list[Any]] = field(default_factory=list)

    def add(self, layer_id: int, indices: Any, scores: Any, kv_group: int | None = None) -> None:
        """One layer's top-k (and scores): decode rows copied, prefill chunks counted
        (a KV group's selection, ``kv_group`` given, is kept for decode rows only)."""
        ops = _ops_for(indices)
        rows = ops.rows(indices)
        if rows.shape[0] != self.layout.rows:
            raise InputError(
                f"record_topk got {rows.shape[0]} rows of top-k for a step of "
                f"{self.layout.rows} query tokens"
            )
        if self.layout.decode:
            self.decode_layers.append(layer_id)
            self.decode_groups.append(-1 if kv_group is None else kv_group)
            self.indices.append(ops.int32(self._decode_rows(ops, rows)))
            self.scores.append(
                None if scores is None else ops.floats(self._decode_rows(ops, ops.rows(scores)))
            )
        if self.layout.prefill and kv_group is None:
            self.prefill_layers.append(layer_id)
            self.counts.append(
                [
                    ops.chunk_counts(rows[p.row : p.row + p.tokens], p.start)
                    for p in self.layout.prefill
                ]
            )

    def _decode_rows(self, ops: _Ops, rows: Any) -> Any:
        if len(self.layout.decode) == self.layout.rows:
            return rows
        span = self.layout.decode_range()
        if span is not None:
            return rows[span[0] : span[1]]
        return ops.take(rows, [p.row for p in self.layout.decode])

    def _complete_scores(self) -> list[Any]:
        """The decode scores, when every decode record came with them (else none)."""
        return self.scores if all(s is not None for s in self.scores) else []

    def _decode_shaped(self, flat: np.ndarray, width: int) -> np.ndarray | None:
        """Host values of the decode records as [layers, decode rows, k]."""
        if not self.indices:
            return None
        return flat.reshape(len(self.indices), len(self.layout.decode), width)

    def to_host(self) -> HostStep:
        """Everything recorded, moved to the host in one transfer."""
        scores = self._complete_scores()
        width = max((x.shape[1] for x in self.indices), default=0)
        ops = _ops_for(self.indices[0] if self.indices else self.counts[0][0])
        chunks = [c for layer in self.counts for c in layer]
        indices, values, counts = ops.to_host(
            [ops.pad(x, width, -1) for x in self.indices],
            [ops.pad(s, width, 0.0) for s in scores],
            chunks,
        )
        return HostStep(
            self.layout,
            np.asarray(self.decode_layers, dtype=np.int64),
            self._decode_shaped(indices, width),
            self._decode_shaped(values, width) if scores else None,
            np.asarray(self.prefill_layers, dtype=np.int64),
            _split(counts, [c.shape[0] for c in chunks], len(self.layout.prefill)),
            np.asarray(self.decode_groups, dtype=np.int64),
        )


def _split(flat: np.ndarray, sizes: list[int], per_layer: int) -> list[list[np.ndarray]]:
    """``flat`` cut into ``sizes``, grouped ``per_layer`` pieces at a time."""
    pieces = np.split(flat, np.cumsum(sizes)[:-1]) if sizes else []
    return [list(pieces[i : i + per_layer]) for i in range(0, len(pieces), per_layer or 1)]


class _Ops(ABC):
    """Array operations of one array library (NumPy, or torch on any device)."""

    @abstractmethod
    def int32(self, x: Any) -> Any:
        """An int32 copy."""

    @abstractmethod
    def floats(self, x: Any) -> Any:
        """A float copy: float32 from torch (one transfer with the indices), float64
        from NumPy (statistics as exact as the scores given)."""

    @abstractmethod
    def take(self, x: Any, rows: list[int]) -> Any:
        """The given rows."""

    @abstractmethod
    def chunk_counts(self, rows: Any, start: int) -> Any:
        """Times each position 0 .. start + tokens - 1 was selected by a prefill
        chunk's queries (rows, from position ``start``); padding (< 0) and positions
        after a query's own are left out."""

    @abstractmethod
    def pad(self, x: Any, width: int, value: float) -> Any:
        """``x`` widened to ``width`` columns with ``value``."""

    @abstractmethod
    def to_host(self, indices: list, scores: list, chunks: list) -> list[np.ndarray]:
        """Each list flattened and concatenated, as host arrays (int32, floats, int32)."""

    def rows(self, x: Any) -> Any:
        if x.ndim == 1:
            return x[None, :]
        if x.ndim == 3:
            return x.reshape(-1, x.shape[-1])
        if x.ndim != 2:
            raise InputError(
                f"record_topk takes [k], [rows, k] or [batch, tokens, k], got {tuple(x.shape)}"
            )
        return x


class _NumpyOps(_Ops):
    def int32(self, x: Any) -> np.ndarray:
        return np.array(x, dtype=np.int32)

    def floats(self, x: Any) -> np.ndarray:
        return np.array(x, dtype=np.float64)

    def take(self, x: Any, rows: list[int]) -> np.ndarray:
        return np.asarray(x)[rows]

    def chunk_counts(self, rows: Any, start: int) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        end = start + rows.shape[0]
        query = np.arange(start, end, dtype=np.int64)[:, None]
        target = np.where((rows >= 0) & (rows <= query), rows, end)
        return np.bincount(target.ravel(), minlength=end + 1)[:end].astype(np.int32)

    def pad(self, x: np.ndarray, width: int, value: float) -> np.ndarray:
        if x.shape[1] == width:
            return x
        return np.pad(x, ((0, 0), (0, width - x.shape[1])), constant_values=value)

    def to_host(self, indices: list, scores: list, chunks: list) -> list[np.ndarray]:
        return [_cat(indices, np.int32), _cat(scores, np.float64), _cat(chunks, np.int32)]


def _cat(parts: Sequence[np.ndarray], dtype: Any) -> np.ndarray:
    return np.concatenate([p.ravel() for p in parts]) if parts else np.zeros(0, dtype)


class _TorchOps(_Ops):
    def __init__(self) -> None:
        import torch

        self.torch = torch

    def int32(self, x: Any) -> Any:
        return x.detach().to(self.torch.int32, copy=True)

    def floats(self, x: Any) -> Any:
        return x.detach().to(self.torch.float32, copy=True)

    def take(self, x: Any, rows: list[int]) -> Any:
        return x.index_select(0, self.torch.tensor(rows, device=x.device))

    def chunk_counts(self, rows: Any, start: int) -> Any:
        """On the rows' device, without synchronising it."""
        torch = self.torch
        rows = rows.detach().to(torch.int64)
        end = start + rows.shape[0]
        query = torch.arange(start, end, device=rows.device)[:, None]
        target = torch.where((rows >= 0) & (rows <= query), rows, end).flatten()
        counts = torch.zeros(end + 1, dtype=torch.int32, device=rows.device)
        counts.scatter_add_(0, target, torch.ones_like(target, dtype=torch.int32))
        return counts[:end]

    def pad(self, x: Any, width: int, value: float) -> Any:
        if x.shape[1] == width:
            return x
        return self.torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)

    def to_host(self, indices: list, scores: list, chunks: list) -> list[np.ndarray]:
        """One concatenation on the device, one copy (and synchronisation) to the host."""
        torch = self.torch
        parts = [
            *(x.reshape(-1) for x in indices),
            *(s.contiguous().view(torch.int32).reshape(-1) for s in scores),
            *(c.reshape(-1) for c in chunks),
        ]
        flat = torch.cat(parts).cpu().numpy() if parts else np.zeros(0, np.int32)
        a = sum(x.numel() for x in indices)
        b = a + sum(s.numel() for s in scores)
        return [flat[:a], flat[a:b].view(np.float32), flat[b:]]


_NUMPY = _NumpyOps()
_TORCH: list[_TorchOps] = []


def _ops_for(x: Any) -> _Ops:
    if type(x).__module__.startswith("torch"):
        if not _TORCH:
            _TORCH.append(_TorchOps())
        return _TORCH[0]
    return _NUMPY


class Backlog:
    """The steps handed to the writer thread, bounded in bytes.

    When the writer falls behind and ``limit_bytes`` of steps wait, the model's next
    step blocks until enough is written (back-pressure: memory stays bounded and nothing
    is dropped); the seconds it waited add up in ``waited_s``.  One step larger than the
    limit is still taken when nothing else waits."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.waited_s = 0.0
        self._items: deque[tuple[Any, int]] = deque()
        self._bytes = 0
        self._changed = threading.Condition()

    def put(self, item: Any, size: int) -> None:
        with self._changed:
            if self._bytes and self._bytes + size > self.limit_bytes:
                started = time.perf_counter()
                while self._bytes and self._bytes + size > self.limit_bytes:
                    self._changed.wait()
                self.waited_s += time.perf_counter() - started
            self._items.append((item, size))
            self._bytes += size
            self._changed.notify_all()

    def batch(self, commit_due: float, stop: Any) -> tuple[list[Any], bool]:
        """Steps queued within BATCH_SECONDS of the first (or BATCH_RECORDS of them, or
        until ``commit_due``), and whether ``stop`` came (the tracer was closed)."""
        steps: list[Any] = []
        taken, first = self.get(timeout=1.0)
        if not taken or first is stop:
            return steps, taken
        steps.append(first)
        records = records_of(first)
        deadline = min(time.monotonic() + BATCH_SECONDS, commit_due)
        while records < BATCH_RECORDS:
            taken, item = self.get(timeout=deadline - time.monotonic())
            if not taken:
                break
            if item is stop:
                return steps, True
            steps.append(item)
            records += records_of(item)
        return steps, False

    def drain_until(self, stop: Any, *, stopped: bool) -> None:
        """Take and drop items until ``stop`` (unless it already came)."""
        while not stopped:
            taken, item = self.get(timeout=1.0)
            stopped = taken and item is stop

    def get(self, timeout: float) -> tuple[bool, Any]:
        """(True, the oldest item), or (False, None) after ``timeout`` seconds."""
        with self._changed:
            if not self._changed.wait_for(lambda: bool(self._items), max(timeout, 0.0)):
                return False, None
            item, size = self._items.popleft()
            self._bytes -= size
            self._changed.notify_all()
            return True, item


def yield_to_the_model(niceness: int = 10) -> None:
    """Lower this thread's scheduling priority (Linux schedules threads one by one), so
    that on a busy host the writer takes the CPU time the model leaves idle."""
    if sys.platform.startswith("linux"):
        with suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)


def records_of(item: Any) -> int:
    """(step, layer, request) records of a queued item."""
    if isinstance(item, tuple):  # decode: (layers, indices [layers, rows, k], ...)
        return int(item[1].shape[0] * item[1].shape[1])
    return int(item.records)
