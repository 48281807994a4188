"""What an ingest did, file by file."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvtrace.warehouse.rows.dsa_checks import StatCheck

CANNOT_READ = "cannot be read"  # the status of a file or folder skipped, with the reason


@dataclass
class FileReport:
    """What happened to one source file."""

    path: str
    run_id: str
    status: str  # "ingested" | "already ingested" | "empty file" | "cannot be read (why)"
    rows: int = 0
    rejected: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    disagreements: dict[str, StatCheck] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the reader said of the file
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

    @property
    def unreadable(self) -> list[str]:
        """The files and folders that could not be read, and were skipped (as shown)."""
        return [f.path for f in self.files if f.status.startswith(CANNOT_READ)]

    def by_family(self) -> dict[str, tuple[int, int]]:
        """Per family, in the order first met: files ingested and rows they stored."""
        counts: dict[str, tuple[int, int]] = {}
        for f in self.files:
            if f.status == "ingested":
                files, rows = counts.get(f.family, (0, 0))
                counts[f.family] = (files + 1, rows + f.rows)
        return counts
