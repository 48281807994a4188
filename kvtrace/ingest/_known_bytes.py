"""Which run already holds a source file's bytes, so that the same bytes add nothing.

The journal records each ingested source's size and sha256.  The bytes are held by the
run the file is ingested into when any of its commits recorded them, or by another run
whose ``runs`` row says it read them as the same format (so with the same family): a
copy in another folder or under another name adds nothing.  A run the user names
(``--run-name``) is one they build of its own files: bytes another run holds too (a
task's predictions unchanged between two evaluations) are its own as well.
A file of a size no commit recorded is surely new, and is hashed while its family reads
it instead of first.
"""

from __future__ import annotations

import json

import pyarrow.compute as pc

from kvtrace.ingest._sources import SourceFile
from kvtrace.warehouse import Warehouse


def run_holding(
    warehouse: Warehouse, source: SourceFile, run_id: str, fmt: str, named: bool = False
) -> str | None:
    """The run that holds ``source``'s bytes (``run_id`` first; only it when the user
    ``named`` the run), or None: they are new."""
    commits = warehouse.snapshot().commits
    same_size = commits.filter(pc.equal(commits["source_size"], source.size))
    if same_size.num_rows == 0:
        source.hash_in_background()
        return None
    sha256 = source.sha256()
    same = same_size.filter(pc.equal(same_size["source_sha256"], sha256))
    runs = list(dict.fromkeys(same["run_id"].to_pylist()))
    if run_id in runs:
        return run_id
    if named:
        return None
    return next((run for run in runs if fmt in _formats_read(warehouse, run, sha256)), None)


def _formats_read(warehouse: Warehouse, run_id: str, sha256: str) -> set[str]:
    """The formats ``run_id``'s ``runs`` rows say the source of ``sha256`` was read as."""
    files = warehouse.run_files(run_id, "runs")
    if not files:
        return set()
    rows = warehouse.read_files(files, columns=["run_id", "collector_config"])
    configs = rows.filter(pc.equal(rows["run_id"], run_id))["collector_config"]
    formats = set()
    for text in configs.to_pylist():
        try:
            config = json.loads(text or "{}")
        except ValueError:
            continue
        if isinstance(config, dict) and config.get("source_sha256") == sha256:
            formats.add(str(config.get("format")))
    return formats
