"""Every trace family kvtrace reads, in the order a file is offered to them.

Adding a family is one module with a `kvtrace.ingest.family.Family` object and one line
here.  The order matters only where two families could claim a file: a Chrome trace
and a benchmark result are told by their first bytes before any family parses a first
record, and a ``.json`` file no other family reads is a serving run's summary.
"""

from __future__ import annotations

from kvtrace.errors import InputError
from kvtrace.ingest.family import Family, IngestOptions
from kvtrace.ingest.probe import Probe
from kvtrace.ingest.readers.dsa import DSA
from kvtrace.ingest.readers.eval_preds import EVAL
from kvtrace.ingest.readers.kineto import TIMELINE
from kvtrace.ingest.readers.kv_events import KV_EVENTS_FAMILY
from kvtrace.ingest.readers.results import BENCHMARK
from kvtrace.ingest.readers.run_summary import RUN_SUMMARY
from kvtrace.ingest.readers.serving import POOL, REQUESTS
from kvtrace.ingest.readers.workload import WORKLOAD

FAMILIES: tuple[Family, ...] = (
    TIMELINE,
    BENCHMARK,
    KV_EVENTS_FAMILY,
    POOL,
    REQUESTS,
    EVAL,
    WORKLOAD,
    DSA,
    RUN_SUMMARY,
)
BY_NAME: dict[str, Family] = {family.name: family for family in FAMILIES}
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz")
KINETO_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")  # what PyTorch's profiler names


def choose(probe: Probe, options: IngestOptions) -> tuple[Family, str] | None:
    """The family that reads ``probe``'s file and its format there, or None.

    ``--kind`` decides, else a profiler trace's own file name, else the content.
    """
    if options.kind is None and probe.path.name.endswith(KINETO_SUFFIXES):
        return TIMELINE, "kineto"  # its reader says what is wrong if it is not one
    if probe.is_empty:
        return None
    if options.kind is not None:
        family = BY_NAME[options.kind]
        return family, family.forced_format(probe)
    if options.columns is not None and not probe.is_json_document:
        return BY_NAME["workload"], "mapped"
    for family in FAMILIES:
        if (fmt := family.recognise(probe)) is not None:
            return family, fmt
    return None


def unknown(probe: Probe) -> InputError:
    """The error for a file that no family reads, saying what kvtrace looked for."""
    path = probe.path
    if not probe.is_json_document and probe.csv_header and len(probe.csv_header) > 1:
        header = ", ".join(probe.csv_header[:8])
        return InputError(
            f"{path} is not a CSV file kvtrace knows: its header ({header}) has the columns "
            "of none of the Azure, BurstGPT or Splitwise/Vidur arrival traces, nor of "
            "Vidur's request or batch metrics; --columns names the columns of another "
            "arrival trace"
        )
    if probe.first_record is None and path.name.endswith(JSONL_SUFFIXES):
        return InputError(f"{path}: the first line is not JSON")
    return InputError(
        f"{path} is not a trace kvtrace knows: kvtrace reads DSA records "
        "(selected_token_pos), pool snapshots (worker_id, held_tokens), request metrics "
        "(execution_mode, latency_s), RULER predictions (pred, outputs), arrival traces "
        "(Mooncake JSONL; Azure, BurstGPT, Splitwise CSV), benchmark results (vLLM, "
        "SGLang bench_serving, AIPerf, GenAI-Perf, Vidur), KV-cache event batches "
        "(BlockStored, BlockRemoved), Kineto profiler traces (traceEvents) and serving run "
        "summaries (*_summary.json); --kind forces one"
    )
