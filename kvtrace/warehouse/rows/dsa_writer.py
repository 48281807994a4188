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
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvtrace.kernels import block_stats
from kvtrace.kernels.block_stats import PositionLists
from kvtrace.warehouse import Commit, Warehouse
from kvtrace.warehouse.rows.dsa_checks import SourceChecks, check_source_stats
from kvtrace.warehouse.rows.dsa_columns import complete
from kvtrace.warehouse.rows.rejects import BadLine
from kvtrace.warehouse.schema.dsa import DSA_STEPS, TIERS
from kvtrace.warehouse.table_file import TableFile

FLUSH_BYTES = 24 << 20  # Arrow bytes buffered before a row group is written
FILE_BYTES = 256 << 20  # a data file is closed once it is this large on disk
DEFAULT_PREFIX_KEY_TOKENS = 256  # the seed tracer's --trace-prefix-key-tokens
_INT32_MAX = 2**31 - 1


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
        self._offset_hist: list[pa.Table] = []
        self._files: dict[tuple[str, int], tuple[TableFile, tuple[int, int, int]]] = {}
        self._fill_hist: list[pa.Table] = []
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
        self._write_histograms()
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
        keep = self._drop_other_events(cols)
        reasons = self._structural_problems(cols)
        keep_rows = np.flatnonzero(keep & (reasons == ""))
        self._reject(raw_of, lines, reasons, keep)
        if len(keep_rows) == 0:
            return
        if len(keep_rows) < len(keep):
            take = pa.array(keep_rows)
            cols = {name: _take(col, take) for name, col in cols.items()}
            lines = lines[keep_rows]

        seq_len = _ints(cols["seq_len"])
        lists = PositionLists.from_arrow(_combined(cols["positions"]))
        scored = _scores(cols["scores"], lists)
        scores, has_scores = scored if scored is not None else (None, None)
        bad = np.full(len(seq_len), "", dtype=object)
        bad[block_stats.out_of_range_rows(lists, seq_len)] = "position outside [0, seq_len)"
        if scored is not None:
            given = np.asarray(
                pc.fill_null(pc.list_value_length(_combined(cols["scores"])), 0).to_numpy(
                    zero_copy_only=False
                )
            )
            mismatch = has_scores & (given != lists.lengths)
            bad[mismatch & (bad == "")] = "scores list and position list differ in length"
        ok = bad == ""
        if not ok.all():
            lists = _take_lists(lists, ok)
            scores = _take_lists(scores, ok) if scores is not None else None
        lists_sorted, score_values, repeated = block_stats.sort_lists(
            PositionLists(lists.values.astype(np.int32, copy=False), lists.offsets),
            scores.values if scores is not None else None,
        )
        dup_rows = np.flatnonzero(ok)[repeated]
        bad[dup_rows] = "duplicate positions in selected_token_pos"
        self._reject(raw_of, lines, bad, np.ones(len(bad), dtype=bool))
        final = np.flatnonzero(bad == "")
        if len(final) == 0:
            return
        if repeated.any():
            lists_sorted = _take_lists(lists_sorted, ~repeated)
            if score_values is not None and scores is not None:
                score_values = _take_lists(
                    PositionLists(score_values, scores.offsets), ~repeated
                ).values
        if len(final) < len(bad):
            take = pa.array(final)
            cols = {name: _take(col, take) for name, col in cols.items()}
        scored_rows = has_scores[final] if has_scores is not None else None
        seq_len, lines = seq_len[final], lines[final]
        request_id = self._request_ids(cols)
        if self.skip_stored:
            fresh = self._fresh_records(cols, request_id)
            if not fresh.all():
                if not fresh.any():
                    return
                take = pa.array(np.flatnonzero(fresh))
                cols = {name: _take(col, take) for name, col in cols.items()}
                kept_scores = (
                    _take_lists(PositionLists(score_values, lists_sorted.offsets), fresh).values
                    if score_values is not None
                    else None
                )
                lists_sorted, score_values = _take_lists(lists_sorted, fresh), kept_scores
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
            np.stack([request, _ints(cols["step_idx"]), _ints(cols["layer_id"]), size], axis=1)
        )
        stored = self._stored_keys(np.unique(request))
        fresh = np.ones(len(keys), dtype=bool)
        for row, key in enumerate(_key_bytes(keys)):
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
        return set(_key_bytes(keys))

    def _drop_other_events(self, cols: dict[str, Any]) -> np.ndarray:
        event = cols["event"]
        keep = pc.fill_null(pc.equal(event, "dsa_topk"), True)
        keep = np.asarray(keep.to_numpy(zero_copy_only=False), dtype=bool)
        decode = cols["is_decode"]
        if decode.null_count < len(decode):
            prefill = ~np.asarray(pc.fill_null(decode, True).to_numpy(zero_copy_only=False))
            self.result.skipped["prefill record (is_decode=false)"] += int((prefill & keep).sum())
            keep &= ~prefill
        others = int((~keep).sum()) - self.result.skipped["prefill record (is_decode=false)"]
        if others > 0:
            self.result.skipped["record of another event"] += others
        return keep

    def _structural_problems(self, cols: dict[str, Any]) -> np.ndarray:
        n = len(cols["layer_id"])
        reasons = np.full(n, "", dtype=object)
        id_column = "request_key" if self.string_ids else "request_id"
        required = {
            "request_id": cols[id_column],
            "layer_id": cols["layer_id"],
            "seq_len_current": cols["seq_len"],
            "selected_token_pos": cols["positions"],
        }
        if not self.string_ids:  # the nested layout derives step_idx from seq_len_current
            required["step_idx"] = cols["step_idx"]
        for name, column in required.items():
            missing = np.asarray(pc.is_null(column).to_numpy(zero_copy_only=False))
            reasons[missing & (reasons == "")] = f"missing field {name}"
        null_rows = _rows_with_null_values(_combined(cols["positions"]))
        reasons[null_rows[reasons[null_rows] == ""]] = "null inside selected_token_pos"
        lengths = np.asarray(
            pc.fill_null(pc.list_value_length(cols["positions"]), 1).to_numpy(zero_copy_only=False)
        )
        reasons[(lengths == 0) & (reasons == "")] = "empty selected_token_pos"
        seq_len = np.asarray(pc.fill_null(cols["seq_len"], 1).to_numpy(zero_copy_only=False))
        reasons[(seq_len <= 0) & (reasons == "")] = "seq_len_current must be positive"
        reasons[(seq_len > _INT32_MAX) & (reasons == "")] = "seq_len_current is too large"
        step = np.asarray(pc.fill_null(cols["step_idx"], 0).to_numpy(zero_copy_only=False))
        reasons[(step < 0) & (reasons == "")] = "step_idx is negative"
        reasons[(step > _INT32_MAX) & (reasons == "")] = "step_idx is too large"
        if not self.string_ids:
            request = np.asarray(pc.fill_null(cols["request_id"], 0).to_numpy(zero_copy_only=False))
            reasons[(request < 0) & (reasons == "")] = "request_id is negative"
        layer = np.asarray(pc.fill_null(cols["layer_id"], 0).to_numpy(zero_copy_only=False))
        reasons[((layer < 0) | (layer > 32767)) & (reasons == "")] = "layer_id out of range"
        size = pc.fill_null(cols["block_size"], self.block_size)
        size = np.asarray(size.to_numpy(zero_copy_only=False))
        reasons[(size <= 0) & (reasons == "")] = "block size must be positive"
        reasons[(size > _INT32_MAX) & (reasons == "")] = "block size is too large"
        return reasons

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
        touched = PositionLists(  # the distinct blocks of each row, ascending
            _block_ids_of_runs(lists, blocks, block_size),
            np.concatenate(([0], np.cumsum(blocks.unique_blocks))),
        )
        offsets = block_stats.offset_stats(lists, seq_len, windows=())
        hit = np.asarray(pc.fill_null(cols["prefix_hit"], False).to_numpy(zero_copy_only=False))
        region_tokens = _floats(cols["prefix_region_tokens"]).copy()  # the tracer's, in tokens
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
        layer = _ints(cols["layer_id"])
        step = _ints(cols["step_idx"])
        self._note_requests(request_id, dataset, cols, step, region_tokens, hit)

        columns = {
            "run_id": pa.array([self.commit.run_id] * n, pa.string()),
            "dataset": dataset,
            "block_size": pa.array(block_size, pa.int32()),
            "request_id": pa.array(request_id),
            "step_idx": pa.array(step, pa.int32()),
            "layer_id": pa.array(layer, pa.int16()),
            "seq_len": pa.array(seq_len, pa.int32()),
            "batch_step": _combined(cols["batch_step"]).cast(pa.int64()),
            "ts_us": _combined(cols["ts_us"]).cast(pa.float64()),
            "topk": _combined(cols["topk"]),
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
            "step_latency_us": _combined(cols["step_latency_us"]),
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
            **_score_columns(cols, score_values, scored_rows, lists),
            **_tier_columns(cols, touched),
        }
        # Own every buffer: a slice of the parsed chunk would keep the whole chunk alive.
        table = pa.table({name: _owned(column) for name, column in columns.items()})
        self._buffer.append(table)
        self._buffered_bytes += table.nbytes
        self.result.rows += n
        self._histograms(table, lists, seq_len, blocks)
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
        step = _ints(cols["step_idx"])
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
        stated = _floats(cols["prefix_cached_blocks"]) * block_size
        if self.prefix_key_tokens is not None:
            key_tokens = np.where(np.isnan(stated), np.nan, float(self.prefix_key_tokens))
        else:
            with np.errstate(invalid="ignore"):
                unstated = ~(stated > 0) & ~np.isnan(stated)
            key_tokens = np.where(unstated, float(self.unstated_key_tokens), stated)
        return np.minimum(prompt, key_tokens)

    def _request_ids(self, cols: dict[str, Any]) -> np.ndarray:
        if not self.string_ids:
            return _ints(cols["request_id"])
        keys = _combined(cols["request_key"]).to_pylist()
        for key in dict.fromkeys(keys):
            if key not in self.request_ids:
                self.request_ids[key] = len(self.request_ids)
        return np.fromiter((self.request_ids[k] for k in keys), dtype=np.int64, count=len(keys))

    def _datasets(self, cols: dict[str, Any]) -> pa.Array:
        n = len(cols["layer_id"])
        if self.dataset_override:
            values = pa.array([self.dataset] * n, pa.string())
        else:
            values = _combined(pc.fill_null(cols["dataset"], self.dataset))
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
        keys = _combined(cols["request_key"]).to_pylist()
        prefix_key = _combined(cols["prefix_key"]).to_pylist()
        hit_given = _combined(cols["prefix_hit"]).to_pylist()
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

    def _histograms(
        self,
        table: pa.Table,
        lists: PositionLists,
        seq_len: np.ndarray,
        blocks: block_stats.BlockStats,
    ) -> None:
        groups = _RowGroups.of(table)
        self._offset_hist.append(_offset_histogram(groups, lists, seq_len))
        self._fill_hist.append(_histogram(groups, blocks.run_rows, blocks.run_tokens, "tokens"))

    # -- output ----------------------------------------------------------------------------------

    def _flush(self) -> None:
        """Hand the buffered rows to the write thread (a row group per partition, encoded
        while the next rows are checked); fold the histograms."""
        if not self._buffer:
            return
        table = pa.concat_tables(self._buffer)
        self._buffer, self._buffered_bytes = [], 0
        self._offset_hist = [_merged_histogram(self._offset_hist, "offset")]
        self._fill_hist = [_merged_histogram(self._fill_hist, "tokens")]
        self._wait_for_write()  # one write at a time: memory stays bounded
        if self._write_thread is None:
            self._write_thread = ThreadPoolExecutor(1, thread_name_prefix="kvtrace-dsa-write")
        self._writing = self._write_thread.submit(self._write_row_groups, table)

    def _write_row_groups(self, table: pa.Table) -> None:
        for part in _partitions(table):
            if not _is_sorted(part):
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
        first, last = _sort_key(part, 0), _sort_key(part, part.num_rows - 1)
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

    def _write_histograms(self) -> None:
        for name, parts, value in (
            ("dsa_offset_hist", self._offset_hist, "offset"),
            ("dsa_fill_hist", self._fill_hist, "tokens"),
        ):
            if not parts:
                continue
            merged = _merged_histogram(parts, value)
            merged = merged.append_column(
                "run_id", pa.array([self.commit.run_id] * merged.num_rows, pa.string())
            )
            for part in _partitions(merged):
                part = part.sort_by(value)
                self.warehouse.write(self.commit, name, part)


# -- helpers -------------------------------------------------------------------------------------


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


def _key_bytes(keys: np.ndarray) -> list[bytes]:
    """Each row of a contiguous (n, 4) int64 array as 32 bytes (a hashable record key)."""
    rows = keys.view(np.dtype((np.void, 32))).ravel()
    return cast(list[bytes], rows.tolist())  # unstructured void items list as bytes


def _combined(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column


def _take(column: pa.ChunkedArray | pa.Array, indices: pa.Array) -> pa.Array:
    return _combined(column).take(indices)


def _owned(array: pa.Array) -> pa.Array:
    """A copy of ``array`` with buffers of its own (the lists built here already are)."""
    if pa.types.is_list(array.type):
        return array
    return pa.concat_arrays([array])


def _ints(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(_combined(column).to_numpy(zero_copy_only=False), dtype=np.int64)


def _floats(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(
        _combined(column).cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64
    )


def _take_lists(lists: PositionLists, keep: np.ndarray) -> PositionLists:
    rows = lists.row_ids()
    values = lists.values[keep[rows]]
    lengths = lists.lengths[keep]
    return PositionLists(values, np.concatenate(([0], np.cumsum(lengths))))


def _scores(
    column: pa.ChunkedArray | pa.Array, positions: PositionLists
) -> tuple[PositionLists, np.ndarray] | None:
    """Score lists aligned with ``positions`` (NaN where a row has none) and rows with scores.

    Returns None when no row has scores.  A row whose score count differs from its
    position count is marked in the second array as well (the caller rejects it).
    """
    array = _combined(column)
    if array.null_count == len(array):
        return None
    given = PositionLists.from_arrow(array)
    present = np.asarray(array.is_valid().to_numpy(zero_copy_only=False))
    usable = present & (given.lengths == positions.lengths)
    values = np.full(len(positions.values), np.nan, dtype=np.float32)
    target = usable[positions.row_ids()]
    values[target] = np.asarray(given.values, dtype=np.float32)[usable[given.row_ids()]]
    return PositionLists(values, positions.offsets), present


def _score_columns(
    cols: dict[str, Any],
    score_values: np.ndarray | None,
    scored_rows: np.ndarray | None,
    lists: PositionLists,
) -> dict[str, pa.Array]:
    """Score min/mean/max: the source's, else computed from the stored scores."""
    stats = {name: _floats(cols[name]) for name in ("score_min", "score_mean", "score_max")}
    if score_values is not None and scored_rows is not None:
        nonempty = lists.lengths > 0
        starts = lists.offsets[:-1][nonempty]
        use = (nonempty & scored_rows)[nonempty]
        for name, reducer in (
            ("score_min", np.minimum),
            ("score_max", np.maximum),
            ("score_mean", np.add),
        ):
            value = np.full(lists.num_rows, np.nan)
            reduced = reducer.reduceat(score_values.astype(np.float64), starts)
            if name == "score_mean":
                reduced /= lists.lengths[nonempty]
            value[np.flatnonzero(nonempty)[use]] = reduced[use]
            stats[name] = np.where(np.isnan(stats[name]), value, stats[name])
    return {name: pa.array(value, pa.float32(), from_pandas=True) for name, value in stats.items()}


def _tier_columns(cols: dict[str, Any], touched: PositionLists) -> dict[str, pa.Array]:
    out: dict[str, pa.Array] = {}
    for tier in TIERS:
        hits = _combined(cols[f"{tier}_hit_blocks"])
        present = np.asarray(pc.is_valid(hits).to_numpy(zero_copy_only=False))
        counts = np.asarray(
            pc.fill_null(pc.list_value_length(hits), 0).to_numpy(zero_copy_only=False)
        )
        out[f"{tier}_blocks"] = pa.array(np.where(present, counts, 0), pa.int32(), mask=~present)
        out[f"{tier}_bytes_read"] = _combined(cols[f"{tier}_bytes_read"])
        out[f"{tier}_read_ops"] = _combined(cols[f"{tier}_read_ops"]).cast(pa.int32())
        out[f"{tier}_latency_us"] = _combined(cols[f"{tier}_latency_us"])
        out[f"{tier}_hit_blocks"] = _unusual_hits(hits, present, counts, tier, touched)
    return out


def _unusual_hits(
    hits: pa.ListArray, present: np.ndarray, counts: np.ndarray, tier: str, touched: PositionLists
) -> pa.Array:
    """Hit lists, kept only where they are not the obvious value.

    The obvious value is every selected block for HBM and nothing for the pools.
    """
    hit_lists = PositionLists.from_arrow(hits.cast(pa.list_(pa.int64())))
    hit_sorted, _, _ = block_stats.sort_lists(
        PositionLists(np.clip(hit_lists.values, 0, _INT32_MAX).astype(np.int32), hit_lists.offsets)
    )
    obvious = _lists_equal(hit_sorted, touched) if tier == "hbm" else counts == 0
    keep = present & ~obvious
    offsets = np.concatenate(([0], np.cumsum(np.where(keep, hit_sorted.lengths, 0))))
    values = hit_sorted.values[keep[hit_sorted.row_ids()]]
    return pa.ListArray.from_arrays(
        pa.array(offsets.astype(np.int32)), pa.array(values, pa.int32()), mask=pa.array(~keep)
    )


def _block_ids_of_runs(
    lists: PositionLists, blocks: block_stats.BlockStats, block_size: np.ndarray
) -> np.ndarray:
    run_start = np.concatenate(([0], np.cumsum(blocks.run_tokens)[:-1])).astype(np.int64)
    ids: np.ndarray = (lists.values[run_start] // block_size[blocks.run_rows]).astype(np.int32)
    return ids


def _lists_equal(a: PositionLists, b: PositionLists) -> np.ndarray:
    same_length = a.lengths == b.lengths
    equal: np.ndarray = same_length.copy()
    rows = np.flatnonzero(same_length)
    if len(rows):
        mask = same_length[a.row_ids()]
        differ = a.values[mask] != b.values[same_length[b.row_ids()]]
        row_of = a.row_ids()[mask]
        bad_rows = np.unique(row_of[differ])
        equal[bad_rows] = False
    return equal


def _rows_with_null_values(lists: pa.ListArray) -> np.ndarray:
    """Rows of ``lists`` that hold a null element."""
    if lists.values.null_count == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = lists.offsets.to_numpy().astype(np.int64)
    values = lists.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    nulls = np.asarray(values.is_null().to_numpy(zero_copy_only=False))
    rows = np.repeat(np.arange(len(lists), dtype=np.int64), np.diff(offsets))
    return np.unique(rows[nulls])


_DENSE_BINS = 1 << 24


@dataclass
class _RowGroups:
    """The (dataset, block size) group of each row of a batch: the histograms' keys."""

    datasets: pa.Array  # the batch's distinct datasets
    groups: np.ndarray  # each group's key: dataset index << 32 | block size, ascending
    group_of_row: np.ndarray

    @staticmethod
    def of(table: pa.Table) -> _RowGroups:
        dataset = pc.dictionary_encode(_combined(table["dataset"]))
        row_key = (dataset.indices.to_numpy().astype(np.int64) << 32) | table[
            "block_size"
        ].to_numpy().astype(np.int64)
        groups, group_of_row = np.unique(row_key, return_inverse=True)
        return _RowGroups(dataset.dictionary, groups, group_of_row)

    def table(self, key: np.ndarray, counts: np.ndarray, width: int, name: str) -> pa.Table:
        """The histogram rows: ``key`` is group * ``width`` + value, with its count."""
        group = self.groups[key // width]
        return pa.table(
            {
                "dataset": self.datasets.take(pa.array(group >> 32)),
                "block_size": pa.array(group & 0xFFFFFFFF, pa.int32()),
                name: pa.array(key % width, pa.int32()),
                "n": pa.array(counts, pa.int64()),
            }
        )


def _histogram(
    groups: _RowGroups, value_rows: np.ndarray, values: np.ndarray, name: str
) -> pa.Table:
    """Counts of ``values`` per (dataset, block size); ``value_rows`` maps values to rows."""
    width = int(values.max()) + 1 if len(values) else 1
    # The usual batch holds one dataset at one block size: the values are the keys.
    key = (
        values
        if len(groups.groups) == 1
        else (groups.group_of_row[value_rows] * width + values.astype(np.int64))
    )
    if len(groups.groups) * width <= _DENSE_BINS:
        counts = np.bincount(key, minlength=len(groups.groups) * width)
        key = np.flatnonzero(counts)
        counts = counts[key]
    else:
        key, counts = np.unique(key, return_counts=True)
    return groups.table(key, counts, width, name)


def _offset_histogram(groups: _RowGroups, lists: PositionLists, seq_len: np.ndarray) -> pa.Table:
    """Counts of every position's offset (``seq_len - 1 - position``) per (dataset, block
    size): a batch of one group, the usual one, is counted in one compiled pass."""
    if len(groups.groups) == 1 and len(lists.values):
        from kvtrace.kernels.offset_counts import offset_counts

        counts = offset_counts(lists.values, lists.offsets, np.asarray(seq_len, np.int64))
        key = np.flatnonzero(counts)
        return groups.table(key, counts[key], len(counts), "offset")
    offset = np.repeat(seq_len - 1, lists.lengths) - lists.values
    return _histogram(groups, lists.row_ids(), offset, "offset")


def _merged_histogram(parts: list[pa.Table], value: str) -> pa.Table:
    """Several histogram tables summed into one (counts per dataset, block size, value)."""
    merged = (
        pa.concat_tables(parts).group_by(["dataset", "block_size", value]).aggregate([("n", "sum")])
    )
    return merged.rename_columns({"n_sum": "n"}).select(["dataset", "block_size", value, "n"])


def _sort_key(table: pa.Table, row: int) -> tuple[int, int, int]:
    return tuple(table[c][row].as_py() for c in ("request_id", "step_idx", "layer_id"))


def _is_sorted(table: pa.Table) -> bool:
    """Whether rows already run in (request_id, step_idx, layer_id) order."""
    request, step, layer = (table[c].to_numpy() for c in ("request_id", "step_idx", "layer_id"))
    later_step = (step[1:] > step[:-1]) | ((step[1:] == step[:-1]) & (layer[1:] >= layer[:-1]))
    in_order = (request[1:] > request[:-1]) | ((request[1:] == request[:-1]) & later_step)
    return bool(in_order.all())


def _partitions(table: pa.Table) -> list[pa.Table]:
    """``table`` split by (dataset, block size); no copy when it holds one of each."""
    keys = table.select(["dataset", "block_size"]).group_by(["dataset", "block_size"]).aggregate([])
    if keys.num_rows == 1:
        return [table]
    parts = []
    for dataset, size in zip(
        keys["dataset"].to_pylist(), keys["block_size"].to_pylist(), strict=True
    ):
        mask = pc.and_(pc.equal(table["dataset"], dataset), pc.equal(table["block_size"], size))
        parts.append(table.filter(mask))
    return parts
