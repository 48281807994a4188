"""The registry of trace families: every family kvtrace reads, in the order a file is
offered to them, and every list of them derived from it.

Adding a family is one module with a `kvtrace.ingest.family.Family` object (its name,
what it reads, its tables, how it recognises a file, its reader) and one line in
`BUILT_IN`; the ``--kind`` choices and help, the sentence for a file no family reads and
the per-family counts all come from here.  A family can also live outside kvtrace: an
installed distribution names it in the ``kvtrace.families`` entry-point group, and it is
appended to the built-in ones, loaded once and only when a file no built-in family
claims is offered or ``--kind`` names a family kvtrace does not have (so a command that
needs no such family loads no plugin).

The order matters only where two families could claim a file: a Chrome trace and a
benchmark result are told by their first bytes before any family parses a first
record, and a ``.json`` file no other family reads is a serving run's summary.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import EntryPoint, entry_points

from kvtrace.errors import InputError
from kvtrace.ingest.dataset_files import dataset_sentence
from kvtrace.ingest.family import Family, IngestOptions
from kvtrace.ingest.probe import Probe
from kvtrace.ingest.readers.counters import COUNTERS
from kvtrace.ingest.readers.dsa import DSA
from kvtrace.ingest.readers.eval_preds import EVAL
from kvtrace.ingest.readers.kineto import TIMELINE
from kvtrace.ingest.readers.kv_events import KV_EVENTS_FAMILY
from kvtrace.ingest.readers.nsys import NSYS, not_an_export
from kvtrace.ingest.readers.numerics import NUMERICS
from kvtrace.ingest.readers.prometheus import PROMETHEUS
from kvtrace.ingest.readers.results import BENCHMARK
from kvtrace.ingest.readers.run_summary import RUN_SUMMARY
from kvtrace.ingest.readers.serving import POOL, REQUESTS
from kvtrace.ingest.readers.vidur_profiles import VIDUR_PROFILE
from kvtrace.ingest.readers.workload import WORKLOAD
from kvtrace.warehouse.schema import TABLE_NAMES

BUILT_IN: tuple[Family, ...] = (
    TIMELINE,
    NSYS,
    BENCHMARK,
    KV_EVENTS_FAMILY,
    PROMETHEUS,
    POOL,
    REQUESTS,
    EVAL,
    NUMERICS,
    COUNTERS,
    VIDUR_PROFILE,
    WORKLOAD,
    DSA,
    RUN_SUMMARY,
)
ENTRY_POINT_GROUP = "kvtrace.families"  # where installed distributions name their families
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz")
KINETO_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")  # what PyTorch's profiler names
_BY_NAME: dict[str, Family] = {family.name: family for family in BUILT_IN}


def kind_names() -> tuple[str, ...]:
    """The names ``--kind`` takes, built-in families only (no plugin is loaded)."""
    return tuple(family.name for family in BUILT_IN)


def kind_help() -> str:
    """The help of ``kvtrace ingest --kind``."""
    return (
        f"Read every file as {_listed(list(kind_names()), 'or')} (default: told by each "
        "file's content)."
    )


def family_named(name: str) -> Family:
    """The family ``--kind`` names, an installed one included; raises `InputError`
    when kvtrace has none of that name."""
    if (family := _BY_NAME.get(name)) is not None:
        return family
    for family in installed():
        if family.name == name:
            return family
    names = [*kind_names(), *(family.name for family in installed())]
    raise InputError(f"--kind takes {_listed(names, 'or')}, got {name!r}")


def installed() -> tuple[Family, ...]:
    """The families of installed distributions (``kvtrace.families`` entry points),
    loaded on the first call; raises `InputError` naming a plugin that cannot be loaded."""
    families, broken = _load_installed()
    if broken is not None:
        raise InputError(broken)
    return families


@cache
def _load_installed() -> tuple[tuple[Family, ...], str | None]:
    """The installed families, or the sentence saying which plugin cannot be loaded."""
    loaded: list[Family] = []
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            family = entry.load()
        except Exception as exc:  # a plugin's import can fail any way at all
            return (), f"{_plugin(entry)} cannot be loaded: {type(exc).__name__}: {_first(exc)}"
        if (problem := _not_a_family(family, loaded)) is not None:
            return (), f"{_plugin(entry)} cannot be used: {problem}"
        loaded.append(family)
    return tuple(loaded), None


def _not_a_family(family: object, loaded: list[Family]) -> str | None:
    """What keeps ``family`` from joining the registry, or None."""
    if not isinstance(family, Family):
        return "it is not a kvtrace.ingest.family.Family (it lacks some of its attributes)"
    if family.name in _BY_NAME or any(family.name == other.name for other in loaded):
        return f"kvtrace already has a family named {family.name!r}"
    if unknown_tables := [table for table in family.tables if table not in TABLE_NAMES]:
        return f"the warehouse has no table {', '.join(unknown_tables)}"
    return None


def _plugin(entry: EntryPoint) -> str:
    """How a sentence names an installed family's plugin."""
    source = f" of {entry.dist.name}" if entry.dist is not None else ""
    return f"the trace family plugin {entry.name!r}{source} ({entry.value})"


def _first(exc: BaseException) -> str:
    """The first line of an error's message."""
    return next((line for line in str(exc).splitlines() if line.strip()), repr(exc))


def _listed(items: list[str], last: str) -> str:
    """``a, b, c or d``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {last} {items[-1]}"


def choose(probe: Probe, options: IngestOptions) -> tuple[Family, str] | None:
    """The family that reads ``probe``'s file and its format there, or None.

    ``--kind`` decides, else a profiler trace's own file name, else the content (the
    built-in families first, then the installed ones).
    """
    if options.kind is None and probe.path.name.endswith(KINETO_SUFFIXES):
        return TIMELINE, "kineto"  # its reader says what is wrong if it is not one
    if probe.is_empty:
        return None
    if options.kind is not None:
        family = family_named(options.kind)
        return family, family.forced_format(probe)
    if options.columns is not None and not probe.is_json_document:
        return WORKLOAD, "mapped"
    for family in BUILT_IN:
        if (fmt := family.recognise(probe)) is not None:
            return family, fmt
    for family in installed():
        if (fmt := family.recognise(probe)) is not None:
            return family, fmt
    return None


def unknown(probe: Probe) -> InputError:
    """The error for a file that no family reads, saying what kvtrace looked for."""
    path = probe.path
    if (not_nsys := not_an_export(probe)) is not None:
        return not_nsys
    if (dataset := dataset_sentence(probe)) is not None:
        return InputError(dataset)
    looks_like_json = probe.is_json_document or probe.is_json_list
    if not looks_like_json and probe.csv_header and len(probe.csv_header) > 1:
        header = ", ".join(probe.csv_header[:8])
        return InputError(
            f"{path} is not a CSV file kvtrace knows: its header ({header}) has the columns "
            "of none of the Azure, BurstGPT or Splitwise/Vidur arrival traces, nor of "
            "Vidur's request or batch metrics or operator profiles; --columns names the "
            "columns of another arrival trace"
        )
    if probe.first_record is None and path.name.endswith(JSONL_SUFFIXES):
        return InputError(f"{path}: the first line is not JSON")
    reads = [family.reads for family in (*BUILT_IN, *installed())]
    return InputError(
        f"{path} is not a trace kvtrace knows: kvtrace reads {_listed(reads, 'and')}; "
        "--kind forces one"
    )


__all__ = [
    "BUILT_IN",
    "ENTRY_POINT_GROUP",
    "JSONL_SUFFIXES",
    "KINETO_SUFFIXES",
    "choose",
    "family_named",
    "installed",
    "kind_help",
    "kind_names",
    "unknown",
]
