"""Read a serving run's summary JSON: kept whole, as JSON text, beside its run.

Inside a folder only ``*_summary.json(.gz)`` files are summaries (a bare ``summary.json`` is
a DSA tracer's sidecar, read as run metadata); a ``.json(.gz)`` file named on the
command line that no other family reads is taken as one.
"""

from __future__ import annotations

import json

from kvtrace.errors import InputError
from kvtrace.ingest._lines import read_content
from kvtrace.ingest.family import Advance, FileRows, IngestOptions
from kvtrace.ingest.probe import Probe
from kvtrace.ingest.readers.serving import serving_run_name
from kvtrace.ingest.sink import FileSink
from kvtrace.warehouse.schema.serving import RUN_SUMMARIES

SUFFIXES = ("_summary.json", "_summary.json.gz")


class RunSummaryFamily:
    """Serving run summaries, into ``run_summaries``."""

    name = "summary"
    reads = "serving run summaries (*_summary.json)"
    tables = (RUN_SUMMARIES.name,)
    reads_only_record_keys = False

    def recognise(self, probe: Probe) -> str | None:
        named = probe.source.named and probe.path.name.endswith((".json", ".json.gz"))
        if (named or probe.path.name.endswith(SUFFIXES)) and probe.is_json_document:
            return "summary"
        return None

    def forced_format(self, probe: Probe) -> str:
        return "summary"

    def run_name(self, probe: Probe, fmt: str, options: IngestOptions) -> str:
        return options.run_name or serving_run_name(probe)

    def read(
        self, probe: Probe, fmt: str, sink: FileSink, options: IngestOptions, advance: Advance
    ) -> FileRows:
        try:
            summary = json.loads(read_content(probe.path))
        except RecursionError:
            raise InputError(f"{probe.path} is nested too deeply to read") from None
        except ValueError as exc:
            raise InputError(f"{probe.path} is not valid JSON: {exc}") from None
        if not isinstance(summary, dict):
            raise InputError(f"{probe.path} holds no JSON object; a run summary is one")
        name = self.run_name(probe, fmt, options)
        stored = sink.write_rows(
            "run_summaries",
            [
                {
                    "run_id": sink.run_id,
                    "experiment": options.experiment or name,
                    "source_path": probe.source.shown,
                    "summary": json.dumps(summary, sort_keys=True),
                }
            ],
        )
        return FileRows("serving", rows=stored)


RUN_SUMMARY = RunSummaryFamily()
