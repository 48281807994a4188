"""The one writer of DSA rows: validate, sort, recompute statistics, buffer, write.

Ingest (from JSONL dumps) and the live tracer both hand it batches of canonical columns
(`kvtrace.warehouse.rows.dsa_columns`), so a trace that was collected and one that was
ingested are indistinguishable.  Rows are checked with vectorised NumPy; bad rows go to
the quarantine with a reason.  Every 24 MB of rows becomes a row group of an open,
sorted Parquet file per (dataset, block size), encoded by a thread of its own while the
next rows are checked; nothing is visible until the caller commits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvtrace.kernels import block_stats
from kvtrace.kernels.block_stats import PositionLists
from kvtrace.warehouse import Commit, Warehouse
from kvtrace.warehouse.rows._dsa_arrays import (
    combined,
    floats,
    ints,
    is_sorted,
    key_bytes,
    owned,
    partitions,
    sort_key,
    take_lists,
    take_rows,
)
from kvtrace.warehouse.rows._dsa_batches import (
    checked_lists,
    dsa_topk_rows,
    structural_problems,
)
from kvtrace.warehouse.rows._dsa_step_columns import score_columns, tier_columns, touched_blocks
from kvtrace.warehouse.rows.dsa_checks import SourceChecks, check_source_stats
from kvtrace.warehouse.rows.dsa_columns import complete
from kvtrace.warehouse.rows.dsa_histograms import DsaHistograms
from kvtrace.warehouse.rows.rejects import BadLine
from kvtrace.warehouse.schema.dsa import DSA_STEPS
from kvtrace.warehouse.table_file import TableFile

__all__ = [
    "DEFAULT_PREFIX_KEY_TOKENS",
    "DsaFileResult",
    "DsaWriter",
    "RequestInfo",
    "load_kernels",
]

FLUSH_BYTES = 24 << 20  # Arrow bytes buffered before a row group is written
FILE_BYTES = 256 << 20  # a data file is closed once it is this large on disk
DEFAULT_PREFIX_KEY_TOKENS = 256  # the seed tracer's --trace-prefix-key-tokens


@dataclass
class RequestInfo:
    """What a source says about one request, gathered over all its records."""

    dataset: str
    request_key: str | None
    prompt_tokens: int
    prefix_key: str | None
    prefix_cache_hit: bool | None
    prefix_cached_tokens: int | None
    prefix_region_tokens: int | None


@dataclass
class DsaFileResult:
    """The outcome of ingesting one file (before it is committed)."""

    rows: int = 0
    rejected: list[BadLine] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    checks: SourceChecks = field(default_factory=SourceChecks)
    requests: dict[int, RequestInfo] = field(default_factory=dict)
    datasets: set[str] = field(default_factory=set)
    block_sizes: set[int] = field(default_factory=set)
    first_record: dict[str, Any] = field(default_factory=dict)


class DsaWriter:
    """Write batches of DSA rows into ``commit``.

    Parameters
    ----------
    warehouse, commit
        Where the files go; the caller commits or aborts.
    string_ids
        Rows identify requests by ``request_key`` strings (mapped to dense integers)
        rather than integer ``request_id``.
    dataset, block_size
        Defaults for records that do not name theirs (``dataset`` given by the user
        overrides the records').
    request_ids
        Dense integer ids already given to string request keys of this run; extended in
        place.
    skip_stored
        Leave out records whose key (run, request, step, layer, block size) the run
        already holds or this writer already took: a file that grew, or a copy with other
        bytes, adds only its new records.  Ingest sets it; a live tracer needs no check.
    prefix_key_tokens
        Prompt tokens a dump's prefix key covers (N of the region rule, `_dump_regions`)
        when the user or the run's summary gave it; by default what each record states.
    unstated_key_tokens
        N for a record that states no region (0 cached blocks: the seed tracer's miss),
        by default the seed tracer's 256.
    """

    def __init__(
        self,
        warehouse: Warehouse,
        commit: Commit,
        *,
        string_ids: bool,
        dataset: str,
        dataset_override: bool,
        block_size: int,
        request_ids: dict[str, int],
        skip_stored: bool = False,
        prefix_key_tokens: int | None = None,
        unstated_key_tokens: int = DEFAULT_PREFIX_KEY_TOKENS,
    ) -> None:
        self.warehouse = warehouse
        self.commit = commit
        self.string_ids = string_ids
        self.dataset = dataset
        self.dataset_override = dataset_override
        self.block_size = block_size
        self.request_ids = request_ids
        self.prefix_key_tokens = prefix_key_tokens
        self.unstated_key_tokens = unstated_key_tokens
        self.result = DsaFileResult()
        self._buffer: list[pa.Table] = []
        self._buffered_bytes = 0
        self._histograms = DsaHistograms()
        self._files: dict[tuple[str, int], tuple[TableFile, tuple[int, int, int]]] = {}
        self.skip_stored = skip_stored
        self._taken: set[bytes] = set()
        self._stored_files = warehouse.run_files(commit.run_id, "dsa_steps") if skip_stored else []
        self._write_thread: ThreadPoolExecutor | None = None
        self._writing: Future[None] | None = None
        commit.background_writes.append(self._settle)

    def finish(self) -> DsaFileResult:
        """Write what is buffered, close the files and write the histograms."""
        try:
            self._flush()
            self._wait_for_write()
        finally:
            self._stop_write_thread()
        for handle, _ in self._files.values():
            handle.close()
        self._files.clear()
        self._histograms.write(self.warehouse, self.commit)
        return self.result

    # -- one batch ---------------------------------------------------------------------------

    def add(self, cols: dict[str, Any], lines: np.ndarray, raw_of: Callable[[int], str]) -> None:
        """Validate and buffer a batch of canonical columns.

        ``lines`` numbers the rows for the quarantine (line numbers of a source file, or
        record numbers of a live trace); ``raw_of(line)`` gives a rejected row's text.
        """
        cols = complete(cols, len(lines))
        if not self.result.first_record:
            self.result.first_record = {
                k: cols[k][0].as_py() for k in ("run_name", "dataset", "rank", "world_size")
            }
        keep = dsa_topk_rows(cols, self.result.skipped)
        reasons = structural_problems(cols, string_ids=self.string_ids, block_size=self.block_size)
        keep_rows = np.flatnonzero(keep & (reasons == ""))
        self._reject(raw_of, lines, reasons, keep)
        if len(keep_rows) == 0:
            return
        if len(keep_rows) < len(keep):
            cols = take_rows(cols, keep_rows)
            lines = lines[keep_rows]

        seq_len = ints(cols["seq_len"])
        checked = checked_lists(cols, seq_len)
        lists_sorted, score_values, bad = checked.lists, checked.score_values, checked.problems
        has_scores = checked.has_scores
        self._reject(raw_of, lines, bad, np.ones(len(bad), dtype=bool))
        final = np.flatnonzero(bad == "")
        if len(final) == 0:
            return
        if len(final) < len(bad):
            cols = take_rows(cols, final)
        scored_rows = has_scores[final] if has_scores is not None else None
        seq_len, lines = seq_len[final], lines[final]
        request_id = self._request_ids(cols)
        if self.skip_stored:
            fresh = self._fresh_records(cols, request_id)
            if not fresh.all():
                if not fresh.any():
                    return
                cols = take_rows(cols, np.flatnonzero(fresh))
                kept_scores = (
                    take_lists(PositionLists(score_values, lists_sorted.offsets), fresh).values
                    if score_values is not None
                    else None
                )
                lists_sorted, score_values = take_lists(lists_sorted, fresh), kept_scores
                scored_rows = scored_rows[fresh] if scored_rows is not None else None
                seq_len, lines = seq_len[fresh], lines[fresh]
                request_id = request_id[fresh]
        self._store(cols, request_id, lists_sorted, score_values, scored_rows, seq_len, lines)

    def _fresh_records(self, cols: dict[str, Any], request: np.ndarray) -> np.ndarray:
        """Which rows hold a record key this run does not hold yet (the first of repeats)."""
        size = np.asarray(
            pc.fill_null(cols["block_size"], self.block_size).to_numpy(zero_copy_only=False),
            dtype=np.int64,
        )
        keys = np.ascontiguousarray(
            np.stack([request, ints(cols["step_idx"]), ints(cols["layer_id"]), size], axis=1)
        )
        stored = self._stored_keys(np.unique(request))
        fresh = np.ones(len(keys), dtype=bool)
        for row, key in enumerate(key_bytes(keys)):
            if key in self._taken:
                fresh[row] = False
                self.result.skipped["record repeated within the file"] += 1
            elif key in stored:
                fresh[row] = False
                self.result.skipped[
                    "record already stored (same request, step, layer, block size)"
                ] += 1
            else:
                self._taken.add(key)
        return fresh

    def _stored_keys(self, requests: np.ndarray) -> set[bytes]:
        """Record keys the run already holds for ``requests``."""
        if not self._stored_files:
            return set()
        table = self.warehouse.read_files(
            self._stored_files,
            columns=["request_id", "step_idx", "layer_id", "block_size"],
            filters=[("request_id", "in", requests.tolist())],
        )
        if table.num_rows == 0:
            return set()
        keys = np.ascontiguousarray(
            np.stack([table[c].to_numpy().astype(np.int64) for c in table.column_names], axis=1)
        )
        return set(key_bytes(keys))

    def _reject(
        self,
        raw_of: Callable[[int], str],
        lines: np.ndarray,
        reasons: np.ndarray,
        considered: np.ndarray,
    ) -> None:
        for row in np.flatnonzero(considered & (reasons != "")):
            line_no = int(lines[row])
            self.result.rejected.append(BadLine(line_no, str(reasons[row]), raw_of(line_no)))

    # -- valid rows ---------------------------------------------------------------------------

    def _store(
        self,
        cols: dict[str, Any],
        request_id: np.ndarray,
        lists: PositionLists,
        score_values: np.ndarray | None,
        scored_rows: np.ndarray | None,
        seq_len: np.ndarray,
        lines: np.ndarray,
    ) -> None:
        n = len(seq_len)
        source_size = cols["block_size"]
        size_known = np.asarray(pc.is_valid(source_size).to_numpy(zero_copy_only=False))
        block_size = np.asarray(
            pc.fill_null(source_size, self.block_size).to_numpy(zero_copy_only=False),
            dtype=np.int64,
        )
        blocks = block_stats.block_stats(lists, seq_len, block_size)
        touched = touched_blocks(lists, blocks, block_size)
        offsets = block_stats.offset_stats(lists, seq_len, windows=())
        hit = np.asarray(pc.fill_null(cols["prefix_hit"], False).to_numpy(zero_copy_only=False))
        region_tokens = floats(cols["prefix_region_tokens"]).copy()  # the tracer's, in tokens
        from_dump = np.isnan(region_tokens)
        if from_dump.any():
            region_tokens[from_dump] = self._dump_regions(cols, request_id, block_size)[from_dump]
        region_blocks = np.ceil(region_tokens / block_size)  # NaN where the source has none
        prefix_lists = block_stats.blocks_below(touched, region_blocks)
        with np.errstate(divide="ignore", invalid="ignore"):
            intersection = np.where(
                np.isnan(region_blocks), np.nan, prefix_lists.lengths / blocks.unique_blocks
            )
        check_source_stats(
            self.result.checks,
            cols,
            lists,
            seq_len,
            blocks,
            offsets,
            intersection,
            size_known,
            lines,
        )

        dataset = self._datasets(cols)
        layer = ints(cols["layer_id"])
        step = ints(cols["step_idx"])
        self._note_requests(request_id, dataset, cols, step, region_tokens, hit)

        columns = {
            "run_id": pa.array([self.commit.run_id] * n, pa.string()),
            "dataset": dataset,
            "block_size": pa.array(block_size, pa.int32()),
            "request_id": pa.array(request_id),
            "step_idx": pa.array(step, pa.int32()),
            "layer_id": pa.array(layer, pa.int16()),
            "kv_group": combined(cols["kv_group"]).cast(pa.int16()),
            "seq_len": pa.array(seq_len, pa.int32()),
            "batch_step": combined(cols["batch_step"]).cast(pa.int64()),
            "ts_us": combined(cols["ts_us"]).cast(pa.float64()),
            "topk": combined(cols["topk"]),
            "selected_pos": lists.to_arrow(),
            "scores": (
                pa.ListArray.from_arrays(
                    pa.array(lists.offsets.astype(np.int32)),
                    pa.array(score_values, pa.float32()),
                    mask=pa.array(~scored_rows),
                )
                if score_values is not None and scored_rows is not None
                else pa.nulls(n, pa.list_(pa.float32()))
            ),
            "step_latency_us": combined(cols["step_latency_us"]),
            "unique_blocks": pa.array(blocks.unique_blocks, pa.int32()),
            "offset_min": pa.array(offsets.offset_min, pa.int32()),
            "offset_p50": pa.array(offsets.offset_p50, pa.float32()),
            "offset_max": pa.array(offsets.offset_max, pa.int32()),
            "tokens_per_block_mean": pa.array(blocks.tokens_per_block_mean, pa.float32()),
            "tokens_per_block_p50": pa.array(blocks.tokens_per_block_p50, pa.float32()),
            "tokens_per_block_p95": pa.array(blocks.tokens_per_block_p95, pa.float32()),
            "prefix_blocks": pa.ListArray.from_arrays(
                pa.array(prefix_lists.offsets.astype(np.int32)),
                pa.array(prefix_lists.values, pa.int32()),
                mask=pa.array(np.isnan(region_blocks)),
            ),
            "touched_blocks": touched.to_arrow(),
            **score_columns(cols, score_values, scored_rows, lists),
            **tier_columns(cols, touched),
        }
        # Own every buffer: a slice of the parsed chunk would keep the whole chunk alive.
        table = pa.table({name: owned(column) for name, column in columns.items()})
        self._buffer.append(table)
        self._buffered_bytes += table.nbytes
        self.result.rows += n
        self._histograms.add(table, lists, seq_len, blocks)
        if self._buffered_bytes >= FLUSH_BYTES:
            self._flush()

    def _dump_regions(
        self, cols: dict[str, Any], request_id: np.ndarray, block_size: np.ndarray
    ) -> np.ndarray:
        """A dump's prefix region per row, in tokens: the request's own key region of
        min(prompt length, N) tokens, hit or miss (a seed tracer's hit is the same key
        seen before, so the cached length is that region too).  N is `prefix_key_tokens`
        when given, else what the record says its key covers: the seed tracer states
        ``prefix_cached_blocks`` = ceil(N / block size) on a hit whatever the prompt, but
        0 on a miss, whose key names the same tokens (so the request that first wrote a
        prefix shares it): such a record's N is `unstated_key_tokens`.  The prompt length
        is the request's first decode position, over this chunk and those before it.
        NaN where the dump states no prefix."""
        step = ints(cols["step_idx"])
        order = np.lexsort((step, request_id))
        firsts = order[np.r_[True, request_id[order][1:] != request_id[order][:-1]]]
        prompt_of: dict[int, int] = {}
        for row in firsts.tolist():
            rid, first = int(request_id[row]), int(step[row])
            known = self.result.requests.get(rid)
            prompt_of[rid] = first if known is None else min(known.prompt_tokens, first)
        prompt = np.fromiter(
            (prompt_of[r] for r in request_id.tolist()), dtype=np.float64, count=len(request_id)
        )
        stated = floats(cols["prefix_cached_blocks"]) * block_size
        if self.prefix_key_tokens is not None:
            key_tokens = np.where(np.isnan(stated), np.nan, float(self.prefix_key_tokens))
        else:
            with np.errstate(invalid="ignore"):
                unstated = ~(stated > 0) & ~np.isnan(stated)
            key_tokens = np.where(unstated, float(self.unstated_key_tokens), stated)
        return np.minimum(prompt, key_tokens)

    def _request_ids(self, cols: dict[str, Any]) -> np.ndarray:
        if not self.string_ids:
            return ints(cols["request_id"])
        keys = combined(cols["request_key"]).to_pylist()
        for key in dict.fromkeys(keys):
            if key not in self.request_ids:
                self.request_ids[key] = len(self.request_ids)
        return np.fromiter((self.request_ids[k] for k in keys), dtype=np.int64, count=len(keys))

    def _datasets(self, cols: dict[str, Any]) -> pa.Array:
        n = len(cols["layer_id"])
        if self.dataset_override:
            values = pa.array([self.dataset] * n, pa.string())
        else:
            values = combined(pc.fill_null(cols["dataset"], self.dataset))
        self.result.datasets.update(pc.unique(values).to_pylist())
        return values

    def _note_requests(
        self,
        request_id: np.ndarray,
        dataset: pa.Array,
        cols: dict[str, Any],
        step: np.ndarray,
        region_tokens: np.ndarray,
        hit: np.ndarray,
    ) -> None:
        datasets = dataset.to_pylist()
        keys = combined(cols["request_key"]).to_pylist()
        prefix_key = combined(cols["prefix_key"]).to_pylist()
        hit_given = combined(cols["prefix_hit"]).to_pylist()
        order = np.lexsort((step, request_id))
        firsts = order[np.r_[True, request_id[order][1:] != request_id[order][:-1]]]
        for row in firsts:
            rid = int(request_id[row])
            known = self.result.requests.get(rid)
            if known is not None and known.prompt_tokens <= step[row]:
                continue
            region = None if np.isnan(region_tokens[row]) else int(region_tokens[row])
            self.result.requests[rid] = RequestInfo(
                dataset=datasets[row],
                request_key=keys[row],
                prompt_tokens=int(step[row]),
                prefix_key=prefix_key[row],
                prefix_cache_hit=hit_given[row],
                prefix_cached_tokens=None if region is None else (region if hit[row] else 0),
                prefix_region_tokens=region,
            )

    # -- output ----------------------------------------------------------------------------------

    def _flush(self) -> None:
        """Hand the buffered rows to the write thread (a row group per partition, encoded
        while the next rows are checked); fold the histograms."""
        if not self._buffer:
            return
        table = pa.concat_tables(self._buffer)
        self._buffer, self._buffered_bytes = [], 0
        self._histograms.fold()
        self._wait_for_write()  # one write at a time: memory stays bounded
        if self._write_thread is None:
            self._write_thread = ThreadPoolExecutor(1, thread_name_prefix="kvtrace-dsa-write")
        self._writing = self._write_thread.submit(self._write_row_groups, table)

    def _write_row_groups(self, table: pa.Table) -> None:
        for part in partitions(table):
            if not is_sorted(part):
                part = part.sort_by([(c, "ascending") for c in DSA_STEPS.sort_by[1:]])
            partition = (part["dataset"][0].as_py(), part["block_size"][0].as_py())
            self.result.block_sizes.add(partition[1])
            self._file_for(partition, part).append(part)

    def _wait_for_write(self) -> None:
        """Wait for the write in flight; its error is raised here."""
        writing, self._writing = self._writing, None
        if writing is not None:
            writing.result()

    def _stop_write_thread(self) -> None:
        if self._write_thread is not None:
            self._write_thread.shutdown(wait=True)
            self._write_thread = None

    def _settle(self) -> None:
        """Wait for the write in flight before the commit is aborted (its error does not
        matter then: the files are removed)."""
        with suppress(Exception):
            self._wait_for_write()
        self._stop_write_thread()

    def _file_for(self, partition: tuple[str, int], part: pa.Table) -> TableFile:
        """The open file of ``partition``, or a new one when ``part`` would break its order."""
        first, last = sort_key(part, 0), sort_key(part, part.num_rows - 1)
        handle, previous_last = self._files.get(partition, (None, None))
        if (
            handle is not None
            and previous_last is not None
            and (first < previous_last or handle.bytes_written >= FILE_BYTES)
        ):
            handle.close()
            handle = None
        if handle is None:
            handle = self.warehouse.open_file(self.commit, "dsa_steps")
        self._files[partition] = (handle, last)
        return handle


def load_kernels() -> None:
    """Compile, or load from numba's cache, the kernels `DsaWriter.add` runs, for each
    memory layout it passes (Arrow's buffers are read-only, which numba types apart).

    A tracer calls this before decoding starts: loading them holds the GIL for a few
    tenths of a second (a second on a slow host), which mid-decode stalls the model.
    """
    from kvtrace.kernels.list_checks import scan_rows
    from kvtrace.kernels.offset_counts import offset_counts

    offsets = np.array([0, 1], dtype=np.int64)
    values, bound = np.zeros(1, dtype=np.int32), np.ones(1, dtype=np.int64)
    frozen_values, frozen_bound = values.copy(), bound.copy()
    frozen_values.flags.writeable = frozen_bound.flags.writeable = False
    scan_rows(frozen_values, offsets, frozen_bound)
    scan_rows(frozen_values, offsets, bound)
    scan_rows(values, offsets, bound)
    offset_counts(frozen_values, offsets, bound)
