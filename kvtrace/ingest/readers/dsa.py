"""Read DSA top-k trace files (both JSONL layouts of the tracer) through the `DsaWriter`.

The file is read in chunks of whole lines; a background thread reads and parses the next
chunk (the position lists by a compiled pass, the rest by Arrow) while the writer
validates and stores the current one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from kvtrace.errors import InputError
from kvtrace.ingest._lines import (
    Chunk,
    IntLists,
    ParsedChunk,
    parse_chunk,
    read_chunks,
)
from kvtrace.ingest._values import is_positive_int
from kvtrace.ingest.family import Advance, FileRows, IngestOptions
from kvtrace.ingest.probe import Probe
from kvtrace.ingest.readers._dsa_key_region import stated_key_tokens
from kvtrace.ingest.readers.dsa_formats import SCHEMAS, Format, canonical, detect_format
from kvtrace.ingest.sink import FileSink
from kvtrace.prefetch import prefetched
from kvtrace.warehouse import Warehouse
from kvtrace.warehouse.rows.dsa_writer import DEFAULT_PREFIX_KEY_TOKENS, DsaFileResult, DsaWriter
from kvtrace.warehouse.schema.core import REQUESTS
from kvtrace.warehouse.schema.dsa import (
    DSA_FILL_HIST,
    DSA_OFFSET_HIST,
    DSA_REQUEST_TOKENS,
    DSA_STEPS,
)

_INT_LISTS: dict[Format, IntLists] = {
    "seed": IntLists(lift=("selected_token_pos",), drop=("selected_block_ids",)),
    "nested": IntLists(lift=("selected_token_pos", "topk_indices")),
}
"""The long integer arrays of each layout, read without Arrow's JSON reader (the block
ids are the tracer's own summary of the positions, which the writer recomputes)."""


def read_dsa_file(
    writer: DsaWriter, path: Path, fmt: Format, progress: Callable[[int], None] | None = None
) -> DsaFileResult:
    """Feed every line of ``path`` to ``writer`` and finish it."""
    schema, int_lists = SCHEMAS[fmt], _INT_LISTS[fmt]
    parsed_chunks = ((chunk, parse_chunk(chunk, schema, int_lists)) for chunk in read_chunks(path))
    for chunk, parsed in prefetched(parsed_chunks, depth=1, name="kvtrace-parse"):
        _consume(writer, fmt, chunk, parsed, progress)
    return writer.finish()


def _consume(
    writer: DsaWriter,
    fmt: Format,
    chunk: Chunk,
    parsed: ParsedChunk,
    progress: Callable[[int], None] | None,
) -> None:
    writer.result.rejected.extend(parsed.bad)
    if (note := chunk.truncation_note()) is not None:
        writer.result.rejected.append(note)
    if parsed.table.num_rows:
        writer.add(canonical(parsed.table, fmt), parsed.line_numbers, chunk.line_text)
    if progress:
        progress(chunk.source_offset)


class DsaFamily:
    """DSA top-k traces: the tracer's flat ``event=dsa_topk`` records or its earlier
    nested layout, into ``dsa_steps``, ``requests`` and the histograms."""

    name = "dsa"
    reads = "DSA records (selected_token_pos)"
    tables = (
        REQUESTS.name,
        DSA_STEPS.name,
        DSA_OFFSET_HIST.name,
        DSA_FILL_HIST.name,
        DSA_REQUEST_TOKENS.name,
    )
    reads_only_record_keys = False

    def recognise(self, probe: Probe) -> str | None:
        if probe.first_record is None:
            return None
        try:
            return detect_format(probe.first_line, str(probe.path))
        except InputError:
            return None

    def forced_format(self, probe: Probe) -> str:
        return detect_format(probe.first_line, str(probe.path))

    def run_name(self, probe: Probe, fmt: str, options: IngestOptions) -> str:
        record = probe.first_record or {}
        return str(
            options.run_name
            or record.get("run_name")
            or probe.source.sidecar.get("run_name")
            or probe.source.default_run_name()
        )

    def read(
        self, probe: Probe, fmt: str, sink: FileSink, options: IngestOptions, advance: Advance
    ) -> FileRows:
        sidecar = probe.source.sidecar
        record = probe.first_record or {}
        dataset = options.dataset or record.get("dataset") or sidecar.get("dataset")
        block_size = int(
            sidecar.get("config", {}).get("kv_block_size_tokens") or options.block_size
        )
        given = _given_key_tokens(sidecar, options)
        key_tokens = given or stated_key_tokens(probe.path, block_size) or DEFAULT_PREFIX_KEY_TOKENS
        writer = DsaWriter(
            sink.warehouse,
            sink.commit,
            string_ids=fmt == "nested",
            dataset=str(dataset or "unknown"),
            dataset_override=options.dataset is not None,
            block_size=block_size,
            request_ids=_known_request_keys(sink.warehouse, sink.run_id),
            skip_stored=True,
            prefix_key_tokens=given,
            unstated_key_tokens=key_tokens,
        )
        result = read_dsa_file(writer, probe.path, fmt, advance)  # type: ignore[arg-type]
        datasets = sorted(result.datasets)
        for name in datasets:
            sink.write_rows(
                "requests",
                [
                    {"run_id": sink.run_id, "request_id": rid, **vars(info)}
                    for rid, info in sorted(result.requests.items())
                    if info.dataset == name
                ],
            )
        return FileRows(
            "dsa",
            rows=result.rows,
            rejected=result.rejected,
            skipped=result.skipped,
            checks=result.checks.disagreements(),
            config={
                "block_sizes": sorted(result.block_sizes),
                "prefix_key_tokens": key_tokens,
                **({"config": sidecar["config"]} if "config" in sidecar else {}),
            },
            dataset=datasets[0] if len(datasets) == 1 else ",".join(datasets) or None,
            rank=result.first_record.get("rank"),
            world_size=result.first_record.get("world_size"),
        )


def _given_key_tokens(sidecar: dict[str, Any], options: IngestOptions) -> int | None:
    """Prompt tokens the run's prefix keys cover (N), when given: ``--prefix-key-tokens``,
    else the run's ``summary.json`` config (the seed tracer's
    ``--trace-prefix-key-tokens``); None: what each record states, and for a record that
    states none (a miss), what the file's first stated region says, else the seed
    tracer's 256 (`kvtrace.ingest.readers._dsa_key_region`)."""
    if options.prefix_key_tokens is not None:
        return options.prefix_key_tokens
    config = sidecar.get("config") or {}
    for name in ("prefix_key_tokens", "trace_prefix_key_tokens", "prefix_tokens"):
        value = config.get(name)
        if is_positive_int(value):
            return value
    return None


def _known_request_keys(warehouse: Warehouse, run_id: str) -> dict[str, int]:
    """String request ids already mapped to integers in earlier files of this run."""
    files = warehouse.run_files(run_id, "requests")
    if not files:
        return {}
    table = warehouse.read_files(files, columns=["run_id", "request_id", "request_key"])
    table = table.filter(
        pc.and_(pc.equal(table["run_id"], run_id), pc.is_valid(table["request_key"]))
    )
    return dict(zip(table["request_key"].to_pylist(), table["request_id"].to_pylist(), strict=True))


DSA = DsaFamily()
