"""A commit in the making: the files written for one source (or one collector batch).

`kvtrace.warehouse._store.Warehouse` begins, records and aborts commits; the writers of
data files (`kvtrace.warehouse.table_file`) add their files to one.  Kept apart from both
so that the writers need not import the warehouse that uses them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kvtrace.warehouse._delta_log import DataFile
    from kvtrace.warehouse._storage import CommitHold

COLLECTOR_APP_PREFIX = "kvtrace-commit:"  # the transaction of a commit of no source


class OpenFile(Protocol):
    """A data file still being written for a commit."""

    def discard(self) -> None:
        """Stop writing and remove the file."""


@dataclass
class Commit:
    """Files written for one source (or one collector batch), published together.

    Data files become visible only when `Warehouse.commit` records the commit.
    """

    commit_id: str
    run_id: str
    source_path: str | None = None
    source_sha256: str | None = None
    source_size: int | None = None
    operation: str = "ingest"
    files: list[DataFile] = field(default_factory=list)
    open_files: list[OpenFile] = field(default_factory=list)
    landed: bool = False  # set by `Warehouse.commit`: False when another process's
    # commit of the same source landed first
    hold: CommitHold | None = None  # marks the commit in flight until it ends
    background_writes: list[Callable[[], None]] = field(default_factory=list)
    # each waits for a write a writer still runs in a thread (`Warehouse.abort` calls them
    # before it removes the files)

    @property
    def app_id(self) -> str:
        """The transaction id that makes the commit land once: one per source and run."""
        if self.source_sha256:
            return f"kvtrace-source:{self.run_id}:{self.source_sha256}"
        return f"{COLLECTOR_APP_PREFIX}{self.commit_id}"
