"""What an ingest did, file by file."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvtrace.warehouse.dsa_checks import StatCheck


@dataclass
class FileReport:
    """What happened to one source file."""

    path: str
    run_id: str
    status: str  # "ingested" | "already ingested" | "empty file"
    rows: int = 0
    rejected: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    disagreements: dict[str, StatCheck] = field(default_factory=dict)
    fmt: str = ""
    family: str = ""


@dataclass
class IngestReport:
    files: list[FileReport]

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    @property
    def rejected(self) -> int:
        return sum(f.rejected for f in self.files)
