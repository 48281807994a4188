"""The protocol every trace family's reader follows, and what a reader hands back.

A family (DSA traces, pool series, arrival traces, ...) is one module with one object
that says what it is (its ``name``, what it ``reads``, the ``tables`` it fills), can
`recognise` a file by its content, name the run it belongs to, and `read` it into the
warehouse tables of a commit.  `kvtrace.ingest.families` is their registry, in the
order they are tried; `kvtrace.ingest._commit.commit_file` does everything else (the
already-ingested check, the run id, the transaction, the quarantine) for all of them
alike.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from kvtrace.defaults import DEFAULT_BLOCK_SIZE, Kind
from kvtrace.warehouse.rows.dsa_checks import StatCheck
from kvtrace.warehouse.rows.rejects import BadLine

if TYPE_CHECKING:
    from kvtrace.ingest.probe import Probe
    from kvtrace.ingest.sink import FileSink

Advance = Callable[[int], None]  # called with the bytes of the source read so far


@dataclass(frozen=True)
class ColumnMapping:
    """Which CSV columns hold a trace's fields, for a layout kvtrace does not know
    (``--columns``)."""

    columns: dict[str, str]  # arrival, input_tokens, output_tokens[, model, log_type,
    # session_id]
    arrival_unit: str = "s"  # s, ms, us, or datetime (wall-clock time stamps)


@dataclass(frozen=True)
class IngestOptions:
    """What the user said that applies to every file of one ``kvtrace ingest``."""

    dataset: str | None = None  # a dataset label for every DSA record
    run_name: str | None = None  # overrides what the records or their folder say
    block_size: int = DEFAULT_BLOCK_SIZE  # for DSA records that do not state theirs
    prefix_key_tokens: int | None = None  # prompt tokens a DSA dump's prefix key covers
    kind: Kind | None = None  # forces a family instead of recognising each file
    experiment: str | None = None  # the label of serving runs
    columns: ColumnMapping | None = None  # the columns of a CSV arrival trace of another layout
    # an arrival trace's format where its content cannot tell it (mooncake-delta)
    trace_format: str | None = None


@dataclass
class FileRows:
    """What a family's reader made of one file (its data rows are already in the sink)."""

    kind: str  # the runs row's kind: dsa, serving, eval, workload, benchmark, ...
    rows: int = 0  # records stored
    rejected: list[BadLine] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)  # the runs row's collector_config
    dataset: str | None = None
    rank: int | None = None
    world_size: int | None = None
    skipped: Counter[str] = field(default_factory=Counter)  # records left out, by reason
    checks: dict[str, StatCheck] = field(default_factory=dict)  # source statistics checked
    notes: list[str] = field(default_factory=list)  # said under the file in the report


@runtime_checkable
class Family(Protocol):
    """A trace family's reader."""

    @property
    def name(self) -> str:
        """What ``--kind`` calls it, and what the per-family counts say."""
        ...

    @property
    def reads(self) -> str:
        """What it reads, in a phrase that names what tells its files (e.g. ``DSA records
        (selected_token_pos)``): the sentence for a file no family reads lists them."""
        ...

    @property
    def tables(self) -> tuple[str, ...]:
        """The warehouse tables its reader fills (names from `kvtrace.warehouse.schema`)."""
        ...

    @property
    def reads_only_record_keys(self) -> bool:
        """Whether reading a file looks up nothing in its run but the records it holds:
        then files of one run are read at once, each committed under the run's lock."""
        ...

    def recognise(self, probe: Probe) -> str | None:
        """The file's format within the family (e.g. ``azure``), or None: not ours."""
        ...

    def forced_format(self, probe: Probe) -> str:
        """The format to read the file as when ``--kind`` names this family; raises
        `kvtrace.errors.InputError` when the file cannot be read as one."""
        ...

    def run_name(self, probe: Probe, fmt: str, options: IngestOptions) -> str:
        """The name of the run the file belongs to."""
        ...

    def read(
        self, probe: Probe, fmt: str, sink: FileSink, options: IngestOptions, advance: Advance
    ) -> FileRows:
        """Read the file into ``sink``'s tables; bad records go to ``FileRows.rejected``."""
        ...


__all__ = ["Advance", "ColumnMapping", "Family", "FileRows", "IngestOptions"]
